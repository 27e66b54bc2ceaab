#include "generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "tokenizer/special_tokens.h"

namespace ds4::tools {
namespace {

/// splitmix64 stream; one per tensor, seeded from the model seed and the tensor name, so any
/// tensor's values do not depend on the order tensors are written.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [-1, 1).
  float sym() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0); }

 private:
  uint64_t s_;
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// Fills one row (element index `row` of the tensor's outer rows) of a float tensor.
/// The scales keep every sublayer's output O(1): matrices use U(-a, a) with std 1/sqrt(fan-in).
void fill_row(const model::TensorSpec& spec, const model::Config& c, uint64_t row, Rng& rng,
              std::vector<float>& out) {
  const std::string_view name = spec.name;
  const size_t n = out.size();
  if (spec.kind != model::TensorKind::Vector) {
    float stdev = 1.0f / std::sqrt(static_cast<float>(spec.shape[0]));
    if (spec.kind == model::TensorKind::TokenEmbedding) stdev = 1.0f;
    if (name.find("_ape.") != std::string_view::npos) stdev = 0.3f;
    const float a = stdev * std::sqrt(3.0f);
    for (auto& v : out) v = a * rng.sym();
    return;
  }
  (void)row;
  if (ends_with(name, "norm.weight")) {
    for (auto& v : out) v = 1.0f + 0.1f * rng.sym();
  } else if (ends_with(name, "_scale.weight")) {
    for (auto& v : out) v = 0.5f + 0.1f * rng.sym();
  } else if (ends_with(name, "_base.weight") && name.rfind("output_hc", 0) != 0) {
    // HC bias: pre/post near 0 (sigmoid 0.5 / post 1), combine favouring the identity so the
    // residual streams stay distinct through the Sinkhorn normalisation.
    const size_t nh = c.n_hc;
    for (size_t i = 0; i < n; ++i) {
      out[i] = 0.2f * rng.sym();
      if (i >= 2 * nh) {
        const size_t k = i - 2 * nh;
        if (k / nh == k % nh) out[i] += 2.0f;
      }
    }
  } else if (ends_with(name, "attn_sinks.weight")) {
    for (auto& v : out) v = rng.sym();
  } else {  // output_hc_base, exp_probs_b.bias and anything else small
    for (auto& v : out) v = 0.05f * rng.sym();
  }
}

/// Every problem of `weights` against the layout `specs`, one line each.
std::vector<std::string> weights_problems(const gguf::Reader& weights, const std::vector<model::TensorSpec>& specs) {
  std::vector<std::string> p;
  std::unordered_set<std::string_view> names;
  for (const auto& spec : specs) {
    names.insert(spec.name);
    const gguf::TensorInfo* t = weights.find_tensor(spec.name);
    if (t == nullptr) {
      p.push_back(fmt::format("missing tensor '{}'", spec.name));
      continue;
    }
    const std::vector<uint64_t> shape(t->shape().begin(), t->shape().end());
    if (shape != spec.shape)
      p.push_back(fmt::format("tensor '{}' has shape {}, the layout needs {}", spec.name, t->shape_string(),
                              fmt::format("[{}]", fmt::join(spec.shape, ", "))));
    const bool is_int = spec.kind == model::TensorKind::HashTable;
    if (is_int != (t->type() == GgmlType::I32) || !t->type_known)
      p.push_back(fmt::format("tensor '{}' has type id {}, expected {}", spec.name, t->type_id,
                              is_int ? "I32" : "a float or quantized type"));
  }
  for (const auto& t : weights.tensors())
    if (!names.count(t.name)) p.push_back(fmt::format("tensor '{}' is not part of the layout", t.name));
  return p;
}

}  // namespace

tok::Vocab byte_vocab(uint32_t n_vocab) {
  tok::Vocab v;
  // GPT-2 byte map (spec §6.2): printable bytes keep their code point, the rest map to 256+.
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const uint32_t cp = keep ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    v.tokens.push_back(s);
    v.token_types.push_back(static_cast<int32_t>(tok::TokenType::kNormal));
  }
  for (auto s : tok::kSpecialTokenStrings) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(static_cast<int32_t>(tok::TokenType::kControl));
  }
  if (v.tokens.size() > n_vocab)
    fail("a byte-level vocabulary needs at least {} tokens, the config has {}", v.tokens.size(), n_vocab);
  while (v.tokens.size() < n_vocab) {
    v.tokens.push_back("<unused_" + std::to_string(v.tokens.size()) + ">");
    v.token_types.push_back(static_cast<int32_t>(tok::TokenType::kUnused));
  }
  return v;
}

tok::Vocab shrink_vocab(const tok::Vocab& full, uint32_t n_vocab) {
  auto type_of = [&](size_t i) {
    return full.token_types.empty() ? static_cast<int32_t>(tok::TokenType::kNormal) : full.token_types[i];
  };
  auto is_special = [&](size_t i) {
    const auto t = type_of(i);
    return t == static_cast<int32_t>(tok::TokenType::kControl) ||
           t == static_cast<int32_t>(tok::TokenType::kUserDefined);
  };
  auto is_single_char = [](const std::string& s) {
    if (s.empty()) return false;
    const auto c = static_cast<unsigned char>(s[0]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return s.size() == len;
  };
  std::vector<uint8_t> keep(full.tokens.size(), 0);
  size_t kept = 0;
  for (size_t i = 0; i < full.tokens.size(); ++i)
    if (is_special(i) || (type_of(i) == static_cast<int32_t>(tok::TokenType::kNormal) &&
                          is_single_char(full.tokens[i]))) {
      keep[i] = 1;
      ++kept;
    }
  if (kept > n_vocab)
    fail("vocabulary of {} tokens cannot hold the {} byte and special tokens", n_vocab, kept);
  for (size_t i = 0; i < full.tokens.size() && kept < n_vocab; ++i)
    if (!keep[i] && type_of(i) == static_cast<int32_t>(tok::TokenType::kNormal)) {
      keep[i] = 1;
      ++kept;
    }
  tok::Vocab v;
  std::unordered_set<std::string> have;
  for (size_t i = 0; i < full.tokens.size(); ++i)
    if (keep[i]) {
      v.tokens.push_back(full.tokens[i]);
      v.token_types.push_back(type_of(i));
      have.insert(full.tokens[i]);
    }
  while (v.tokens.size() < n_vocab) {
    v.tokens.push_back("<unused_" + std::to_string(v.tokens.size()) + ">");
    v.token_types.push_back(static_cast<int32_t>(tok::TokenType::kUnused));
  }
  for (const auto& m : full.merges) {
    const auto sp = m.find(' ');
    if (sp == std::string::npos) continue;
    const std::string l = m.substr(0, sp), r = m.substr(sp + 1);
    if (have.count(l) && have.count(r) && have.count(l + r)) v.merges.push_back(m);
  }
  return v;
}

void generate_model(const GenerateOptions& o, const std::string& path) {
  const model::Config& c = o.config;
  c.validate("generator config");
  if (o.vocab.tokens.size() != c.n_vocab)
    fail("vocabulary has {} tokens but the config's vocab_size is {}", o.vocab.tokens.size(), c.n_vocab);

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("deepseek4"));
  w.set("general.name", gguf::Value::string(o.name));
  c.write_metadata(w);
  w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::string("joyai-llm"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(o.vocab.tokens));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array(o.vocab.merges));
  if (!o.vocab.token_types.empty())
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(o.vocab.token_types));

  const auto specs = model::expected_tensors(c);
  if (o.weights != nullptr) {
    const auto p = weights_problems(*o.weights, specs);
    if (!p.empty()) fail("{}: weights do not match the layout ({} problems):\n  - {}", o.weights->name(), p.size(),
                         fmt::join(p, "\n  - "));
  }
  uint64_t total = 0;
  for (const auto& s : specs) {
    w.add_tensor(s.name, model::recipe_type(s, o.recipe), s.shape);
  }
  for (const auto& t : w.tensors()) total += t.n_bytes;

  gguf::FileSink sink(path);
  w.begin(sink);
  std::vector<uint8_t> buf;
  std::vector<float> row;
  uint64_t written = 0;
  int last_pct = -1;
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const auto& spec = specs[ti];
    const auto& decl = w.tensors()[ti];
    Rng rng(o.seed * 0x100000001b3ull ^ fnv1a(spec.name));
    const uint64_t cols = spec.shape[0];
    const uint64_t rows = decl.n_elements / cols;
    const gguf::TensorInfo* src = o.weights ? o.weights->find_tensor(spec.name) : nullptr;
    if (src != nullptr && decl.type == GgmlType::I32) {  // trained hash table: copied as is
      w.write_tensor_data(src->bytes());
      written += decl.n_bytes;
      continue;
    }
    if (decl.type == GgmlType::I32) {  // ffn_gate_tid2eid: n_used distinct experts per token
      std::vector<int32_t> ids(decl.n_elements);
      std::vector<int32_t> perm(c.n_expert);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint32_t e = 0; e < c.n_expert; ++e) perm[e] = static_cast<int32_t>(e);
        for (uint64_t k = 0; k < cols; ++k) {
          const uint64_t j = k + rng.next() % (c.n_expert - k);
          std::swap(perm[k], perm[j]);
          ids[r * cols + k] = perm[k];
        }
      }
      w.write_tensor_data({reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 4});
      written += decl.n_bytes;
      continue;
    }
    const size_t rb = quant::row_bytes(decl.type, static_cast<int64_t>(cols));
    row.resize(cols);
    buf.clear();
    const size_t src_rb = src ? quant::row_bytes(src->type(), static_cast<int64_t>(cols)) : 0;
    for (uint64_t r = 0; r < rows; ++r) {
      if (src != nullptr)
        quant::dequantize_row(src->type(), src->data + r * src_rb, row.data(), static_cast<int64_t>(cols));
      else
        fill_row(spec, c, r, rng, row);
      const size_t at = buf.size();
      buf.resize(at + rb);
      quant::quantize_row(decl.type, row.data(), buf.data() + at, static_cast<int64_t>(cols));
      if (buf.size() >= (8u << 20) || r + 1 == rows) {
        w.write_tensor_data(buf);
        written += buf.size();
        buf.clear();
        const int pct = static_cast<int>(100.0 * static_cast<double>(written) / static_cast<double>(total));
        if (o.progress && pct != last_pct) {
          std::fprintf(stderr, "\rds4-make-model: %3d%% (%s)", pct, spec.name.c_str());
          last_pct = pct;
        }
      }
    }
  }
  w.finish();
  if (o.progress) std::fprintf(stderr, "\rds4-make-model: 100%% %-40s\n", "");
}

}  // namespace ds4::tools
