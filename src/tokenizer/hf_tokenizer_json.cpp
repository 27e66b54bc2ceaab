#include "tokenizer/hf_tokenizer_json.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "common/error.h"
#include "tokenizer/pretokenizer.h"

namespace ds4::tok {
namespace {

using nlohmann::json;

constexpr int32_t kPlaceholderBase = 128000;  // DeepSeek's <｜place▁holder▁no▁0｜> id

const json& member(const json& obj, const char* key, std::string_view where, std::string_view src) {
  if (!obj.is_object() || !obj.contains(key)) fail("{}: {} has no \"{}\"", src, where, key);
  return obj.at(key);
}

bool is_null_or(const json& obj, const char* key, const json& expected) {
  return !obj.contains(key) || obj.at(key).is_null() || obj.at(key) == expected;
}

void check_model(const json& model, std::string_view src) {
  if (member(model, "type", "model", src) != "BPE") fail("{}: model.type is {}, expected \"BPE\"", src, model.at("type").dump());
  if (!is_null_or(model, "byte_fallback", false) || !is_null_or(model, "dropout", json()) ||
      !is_null_or(model, "continuing_subword_prefix", json()) || !is_null_or(model, "end_of_word_suffix", json()) ||
      !is_null_or(model, "ignore_merges", false))
    fail("{}: model uses BPE options ds4 does not implement (byte_fallback, dropout, subword affixes, ignore_merges)", src);
}

void check_normalizer(const json& root, std::string_view src) {
  if (!root.contains("normalizer") || root.at("normalizer").is_null()) return;
  const json& n = root.at("normalizer");
  if (n.value("type", "") == "Sequence" && n.contains("normalizers") && n.at("normalizers").empty()) return;
  fail("{}: normalizer {} is not supported (ds4 implements none)", src, n.dump());
}

void check_pre_tokenizer(const json& root, std::string_view src) {
  const json& p = member(root, "pre_tokenizer", "the file", src);
  bool ok = p.value("type", "") == "Sequence" && p.contains("pretokenizers") && p.at("pretokenizers").size() == 4;
  for (size_t k = 0; ok && k < 3; ++k) {
    const json& s = p.at("pretokenizers").at(k);
    ok = s.value("type", "") == "Split" && s.contains("pattern") && s.at("pattern").contains("Regex") &&
         s.at("pattern").at("Regex") == kSplitPatterns[k] && s.value("behavior", "") == "Isolated" &&
         s.value("invert", true) == false;
  }
  if (ok) {
    const json& b = p.at("pretokenizers").at(3);
    ok = b.value("type", "") == "ByteLevel" && b.value("use_regex", true) == false && b.value("add_prefix_space", true) == false;
  }
  if (!ok) fail("{}: pre_tokenizer is not the DeepSeek V3 split sequence ds4 implements: {}", src, p.dump());
}

}  // namespace

Vocab vocab_from_hf_tokenizer_json(std::string_view json_text, const HfLoadOptions& options, std::string_view src) {
  if (options.vocab_size <= 0) fail("{}: vocab_size {} must be positive", src, options.vocab_size);
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON (byte {}): {}", src, e.byte, e.what());
  }
  try {
    const json& model = member(root, "model", "the file", src);
    check_model(model, src);
    check_normalizer(root, src);
    check_pre_tokenizer(root, src);

    const auto n = static_cast<size_t>(options.vocab_size);
    Vocab v;
    v.tokens.resize(n);
    v.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
    std::vector<uint8_t> set(n, 0);
    auto place = [&](int64_t id, const std::string& text, TokenType type, std::string_view what) {
      if (id < 0 || id >= options.vocab_size)
        fail("{}: {} '{}' has id {}, outside [0, {})", src, what, text, id, options.vocab_size);
      if (set[id] && v.tokens[id] != text)
        fail("{}: id {} is claimed by both '{}' and {} '{}'", src, id, v.tokens[id], what, text);
      v.tokens[id] = text;
      if (!set[id] || type != TokenType::kNormal) v.token_types[id] = static_cast<int32_t>(type);
      set[id] = 1;
    };

    const json& vocab = member(model, "vocab", "model", src);
    if (!vocab.is_object()) fail("{}: model.vocab is not an object", src);
    for (const auto& [text, id] : vocab.items()) {
      if (!id.is_number_integer()) fail("{}: model.vocab['{}'] is not an integer id", src, text);
      place(id.get<int64_t>(), text, TokenType::kNormal, "model.vocab token");
    }
    if (root.contains("added_tokens")) {
      for (const json& a : root.at("added_tokens")) {
        const json& id = member(a, "id", "an added token", src);
        const json& content = member(a, "content", "an added token", src);
        if (!id.is_number_integer() || !content.is_string()) fail("{}: malformed added token {}", src, a.dump());
        const bool special = a.value("special", false);
        place(id.get<int64_t>(), content.get<std::string>(), special ? TokenType::kControl : TokenType::kUserDefined,
              "added token");
      }
    }
    if (options.add_v4_tokens) {
      for (const AddedTokenId& t : deepseek_v4_added_tokens()) {
        if (t.id >= options.vocab_size) continue;
        if (set[t.id] && v.tokens[t.id] == t.text) continue;  // a V4 file: keep its own type
        place(t.id, std::string(t.text), TokenType::kControl, "DeepSeek V4 token");
      }
    }

    std::unordered_set<std::string_view> existing;
    for (size_t id = 0; id < n; ++id)
      if (set[id]) existing.insert(v.tokens[id]);
    for (size_t id = 0; id < n; ++id) {
      if (set[id]) continue;
      if (id < static_cast<size_t>(kPlaceholderBase)) fail("{}: no token has id {}", src, id);
      v.tokens[id] = "<\uFF5Cplace\u2581holder\u2581no\u2581" + std::to_string(id - kPlaceholderBase) + "\uFF5C>";
      if (existing.count(v.tokens[id])) fail("{}: filler name '{}' for id {} is already a token", src, v.tokens[id], id);
      v.token_types[id] = static_cast<int32_t>(TokenType::kUnused);
    }

    const json& merges = member(model, "merges", "model", src);
    if (!merges.is_array()) fail("{}: model.merges is not an array", src);
    v.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_string()) {
        v.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        fail("{}: model.merges[{}] is {}, expected \"left right\" or [left, right]", src, i, m.dump());
      }
    }
    return v;
  } catch (const json::exception& e) {
    fail("{}: unexpected JSON structure: {}", src, e.what());
  }
}

Vocab load_hf_tokenizer_json(const std::string& path, const HfLoadOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open tokenizer.json", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f.good() && !f.eof()) fail("{}: read error", path);
  return vocab_from_hf_tokenizer_json(ss.str(), options, path);
}

}  // namespace ds4::tok
