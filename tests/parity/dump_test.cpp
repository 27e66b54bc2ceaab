// ds4-dump-logits pieces: .npy writer, token parsing, trace file, greedy argmax, and
// evaluate() on the tiny model (the trace hook never changes a value; chunking and greedy
// bookkeeping; the trace holds the reference's names with consistent shapes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "common/error.h"
#include "dump.h"
#include "npy.h"
#include "token_input.h"
#include "trace_file.h"

namespace ds4::dump {
namespace {

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ds4_dump_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- npy ----------------------------------------------------------------------------------

TEST(Npy, HeaderIsTheNumpyFormat) {
  const std::string h = npy_header("<f4", {3});
  ASSERT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t len = static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8);
  EXPECT_EQ(len + 10, h.size());
  EXPECT_EQ(h.substr(10, 57), "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
  EXPECT_EQ(h.back(), '\n');
  EXPECT_NE(npy_header("<i4", {2, 3}).find("'shape': (2, 3), }"), std::string::npos);
  EXPECT_NE(npy_header("<f4", {}).find("'shape': (), }"), std::string::npos);
  EXPECT_THROW(npy_header("<f8", {1}), Error);
  EXPECT_THROW(npy_header("<f4", {-1}), Error);
}

TEST(Npy, WritesHeaderThenLittleEndianData) {
  const std::string path = tmp_path("a.npy");
  const std::vector<int32_t> v = {1, -2, 3, 4, 5, 70000};
  write_npy(path, v, {2, 3});
  const std::string bytes = slurp(path);
  const std::string h = npy_header("<i4", {2, 3});
  ASSERT_EQ(bytes.size(), h.size() + 24);
  EXPECT_EQ(bytes.substr(0, h.size()), h);
  std::vector<int32_t> back(6);
  std::memcpy(back.data(), bytes.data() + h.size(), 24);
  EXPECT_EQ(back, v);
  std::filesystem::remove(path);
}

TEST(Npy, RejectsShapeMismatchAndUnwritablePath) {
  const std::vector<float> v = {1.0f, 2.0f};
  EXPECT_THROW(write_npy(tmp_path("b.npy"), v, {3}), Error);
  EXPECT_THROW(write_npy("/nonexistent-dir/x.npy", v, {2}), Error);
}

// ---- token input -------------------------------------------------------------------------

TEST(TokenInput, ParsesCommasAndWhitespace) {
  EXPECT_EQ(parse_token_list("1,2, 3\n4\t5 ,6", "t"), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(parse_token_list(" 7 ", "t"), (std::vector<int32_t>{7}));
  EXPECT_EQ(parse_token_list("2147483647", "t"), (std::vector<int32_t>{2147483647}));
}

TEST(TokenInput, RejectsBadLists) {
  for (const char* bad : {"", "  ", "1,,2", ",1", "1,", "a", "1,b", "-1", "2147483648", "1.5", "+3"}) {
    EXPECT_THROW(parse_token_list(bad, "t"), Error) << "'" << bad << "'";
  }
  try {
    parse_token_list("1,x2", "ids.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids.txt: 'x2' at byte 2"), std::string::npos) << e.what();
  }
}

TEST(TokenInput, ReadTextFileErrors) {
  EXPECT_THROW(read_text_file("/nonexistent-file-ds4"), Error);
}

// ---- argmax ------------------------------------------------------------------------------

TEST(Argmax, LowestIndexOnTiesAndNanNeverWins) {
  const std::vector<float> a = {1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(argmax(a), 1);
  const std::vector<float> b = {NAN, -5.0f, NAN, -4.0f};
  EXPECT_EQ(argmax(b), 3);
  const std::vector<float> c = {NAN, NAN};
  EXPECT_EQ(argmax(c), 0);
  EXPECT_THROW(argmax({}), Error);
}

// ---- trace file --------------------------------------------------------------------------

struct Record {
  std::string name;
  int64_t pos;
  uint8_t dtype;
  std::vector<int64_t> dims;
  std::string data;
};

std::vector<Record> parse_trace(const std::string& bytes) {
  EXPECT_EQ(bytes.substr(0, 8), "DS4TRACE");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 1u);
  std::vector<Record> out;
  size_t off = 12;
  auto take = [&](void* p, size_t n) {
    if (off + n > bytes.size()) throw std::runtime_error("truncated trace");
    std::memcpy(p, bytes.data() + off, n);
    off += n;
  };
  while (off < bytes.size()) {
    Record r;
    uint32_t nlen = 0;
    take(&nlen, 4);
    r.name.resize(nlen);
    take(r.name.data(), nlen);
    take(&r.pos, 8);
    uint8_t ndim = 0;
    uint16_t pad = 1;
    take(&r.dtype, 1);
    take(&ndim, 1);
    take(&pad, 2);
    EXPECT_EQ(pad, 0);
    r.dims.resize(ndim);
    int64_t count = 1;
    for (auto& d : r.dims) {
      take(&d, 8);
      count *= d;
    }
    r.data.resize(static_cast<size_t>(count) * 4);
    take(r.data.data(), r.data.size());
    out.push_back(std::move(r));
  }
  return out;
}

TEST(TraceFile, RecordsAndFilter) {
  const std::string path = tmp_path("t.bin");
  {
    TraceFile t(path, {"router", "logits"});
    const std::vector<float> f = {1.5f, -2.0f, 0.25f, 8.0f, 0.0f, 1.0f};
    const std::vector<int32_t> i = {4, 9, 1};
    t.f32(3, "l2.attn.q", f, {2, 3});        // filtered out
    t.i32(3, "l2.router.experts", i, {3});
    t.f32(4, "logits", f, {6});
    const int32_t scalar = 17;
    t.i32(5, "l3.router.n", {&scalar, 1}, {});
    EXPECT_EQ(t.records(), 3u);
    t.close();
  }
  const std::vector<Record> r = parse_trace(slurp(path));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].name, "l2.router.experts");
  EXPECT_EQ(r[0].pos, 3);
  EXPECT_EQ(r[0].dtype, 1);
  EXPECT_EQ(r[0].dims, (std::vector<int64_t>{3}));
  std::vector<int32_t> ids(3);
  std::memcpy(ids.data(), r[0].data.data(), 12);
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 9, 1}));
  EXPECT_EQ(r[1].name, "logits");
  EXPECT_EQ(r[1].dtype, 0);
  float f1 = 0;
  std::memcpy(&f1, r[1].data.data() + 4, 4);
  EXPECT_EQ(f1, -2.0f);
  EXPECT_TRUE(r[2].dims.empty());
  EXPECT_EQ(r[2].data.size(), 4u);
  std::filesystem::remove(path);
  EXPECT_THROW(TraceFile("/nonexistent-dir/t.bin", {}), Error);
}

// ---- evaluate on the tiny model ----------------------------------------------------------

std::string tiny(const char* recipe) {
  return std::string(DS4_BINARY_DIR) + "/models/ds4-tiny-" + recipe + ".gguf";
}

/// Collects every trace call in memory.
struct MemTrace final : cpu::ForwardTrace {
  struct Entry {
    std::vector<float> f;
    std::vector<int32_t> i;
    std::vector<int64_t> shape;
  };
  std::map<std::pair<int64_t, std::string>, Entry> entries;
  int duplicates = 0;
  void f32(int64_t pos, const std::string& name, std::span<const float> v,
           const std::vector<int64_t>& shape) override {
    auto [it, fresh] = entries.try_emplace({pos, name});
    duplicates += !fresh;
    it->second.f.assign(v.begin(), v.end());
    it->second.shape = shape;
  }
  void i32(int64_t pos, const std::string& name, std::span<const int32_t> v,
           const std::vector<int64_t>& shape) override {
    auto [it, fresh] = entries.try_emplace({pos, name});
    duplicates += !fresh;
    it->second.i.assign(v.begin(), v.end());
    it->second.shape = shape;
  }
};

class Evaluate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = Engine::open({.model_path = tiny("f32"), .backend = "cpu", .threads = 1}).release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static std::vector<int32_t> prompt(size_t n) {
    std::vector<int32_t> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 977 + 13) % 8000);
    return p;
  }
  static Engine* engine_;
};
Engine* Evaluate::engine_ = nullptr;

TEST_F(Evaluate, TraceChangesNothingAndChunksAgree) {
  DumpRequest req{.prompt = prompt(70), .chunk = 0, .greedy = 5, .ctx = 0, .threads = 1};
  const DumpResult plain = evaluate(*engine_, req, nullptr);
  MemTrace trace;
  req.chunk = 9;
  const DumpResult traced = evaluate(*engine_, req, &trace);
  ASSERT_EQ(plain.logits.size(), traced.logits.size());
  EXPECT_EQ(std::memcmp(plain.logits.data(), traced.logits.data(), plain.logits.size() * 4), 0);
  EXPECT_EQ(plain.greedy, traced.greedy);
  EXPECT_EQ(trace.duplicates, 0);

  // Greedy bookkeeping: fed = prompt + greedy[0..N-2], greedy[i] = argmax of the row before.
  const auto V = static_cast<size_t>(plain.n_vocab);
  ASSERT_EQ(plain.greedy.size(), 5u);
  ASSERT_EQ(plain.fed.size(), 70u + 4u);
  ASSERT_EQ(plain.logits.size(), plain.fed.size() * V);
  for (size_t i = 0; i < 5; ++i) {
    const size_t row = 69 + i;
    EXPECT_EQ(plain.greedy[i], argmax({&plain.logits[row * V], V}));
    if (i < 4) {
      EXPECT_EQ(plain.fed[70 + i], plain.greedy[i]);
    }
  }

  // The trace's logits are the returned rows; shapes match the value counts.
  const model::Config& c = engine_->config();
  for (int64_t p = 0; p < 74; ++p) {
    const auto& e = trace.entries.at({p, "logits"});
    ASSERT_EQ(e.f.size(), V);
    EXPECT_EQ(std::memcmp(e.f.data(), &plain.logits[static_cast<size_t>(p) * V], V * 4), 0);
  }
  for (const auto& [key, e] : trace.entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    EXPECT_EQ(static_cast<size_t>(n), e.f.size() + e.i.size()) << key.second;
  }
  // Per position: the names of every layer; compressed-row bookkeeping per ratio.
  for (int64_t p = 0; p < 74; ++p) {
    for (uint32_t il = 0; il < c.n_layer; ++il) {
      const std::string l = "l" + std::to_string(il) + ".";
      for (const char* n :
           {"hc_attn.pre", "hc_attn.post", "hc_attn.comb", "attn.h", "attn.qr", "attn.q",
            "attn.kv", "attn.o", "attn.low", "attn.y", "hc_ffn.pre", "hc_ffn.post", "hc_ffn.comb",
            "ffn.h", "router.probs", "router.experts", "router.weights", "ffn.expert_mid",
            "ffn.expert_out", "ffn.shared_mid", "ffn.shared_out", "ffn.y", "state"})
        EXPECT_TRUE(trace.entries.count({p, l + n})) << p << " " << l << n;
      const uint32_t R = c.compress_ratios[il];
      const bool emits = R != 0 && (p + 1) % R == 0;
      EXPECT_EQ(trace.entries.count({p, l + "attn.comp_row"}), emits ? 1u : 0u);
      EXPECT_EQ(trace.entries.count({p, l + "idx.comp_row"}), emits && R == 4 ? 1u : 0u);
      if (R != 0) {
        EXPECT_EQ(trace.entries.at({p, l + "attn.n_comp"}).i[0], (p + 1) / R);
      }
      const bool filtered = R == 4 && (p + 1) / 4 > static_cast<int64_t>(c.indexer_top_k);
      ASSERT_EQ(trace.entries.count({p, l + "idx.selected"}), filtered ? 1u : 0u);
      if (filtered) {
        const auto& sel = trace.entries.at({p, l + "idx.selected"}).i;
        EXPECT_EQ(sel.size(), c.indexer_top_k);
        EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
        EXPECT_EQ(trace.entries.at({p, l + "idx.scores"}).f.size(), static_cast<size_t>((p + 1) / 4));
      }
    }
  }
  // FFN output = sum of the expert outputs + shared output (f32, ascending expert id).
  const auto& y = trace.entries.at({40, "l4.ffn.y"}).f;
  const auto& ex = trace.entries.at({40, "l4.ffn.expert_out"});
  const auto& sh = trace.entries.at({40, "l4.ffn.shared_out"}).f;
  const auto& ids = trace.entries.at({40, "l4.router.experts"}).i;
  for (size_t j = 0; j < c.n_embd; ++j) {
    double sum = sh[j];
    for (size_t s = 0; s < ids.size(); ++s) sum += ex.f[s * c.n_embd + j];
    EXPECT_NEAR(y[j], sum, 1e-5 * (1.0 + std::abs(sum)));
  }
}

TEST_F(Evaluate, RejectsBadRequests) {
  DumpRequest req{.prompt = prompt(4)};
  EXPECT_THROW(evaluate(*engine_, {.prompt = {}}, nullptr), Error);
  req.chunk = -1;
  EXPECT_THROW(evaluate(*engine_, req, nullptr), Error);
  req = {.prompt = prompt(4), .greedy = -2};
  EXPECT_THROW(evaluate(*engine_, req, nullptr), Error);
  req = {.prompt = prompt(4), .greedy = 3, .ctx = 5};  // needs 4 + 3 - 1 = 6
  EXPECT_THROW(evaluate(*engine_, req, nullptr), Error);
  req = {.prompt = prompt(4), .threads = 0};
  EXPECT_THROW(evaluate(*engine_, req, nullptr), Error);
  req = {.prompt = {1, 2, static_cast<int32_t>(engine_->config().n_vocab)}};
  EXPECT_THROW(evaluate(*engine_, req, nullptr), Error);
}

TEST_F(Evaluate, TextTokensAndFiles) {
  const std::string text = "Quel ramo del lago di Como";
  const std::vector<int32_t> all = engine_->tokenizer().encode_plain(text);
  ASSERT_GT(all.size(), 3u);
  EXPECT_EQ(tokens_from_text(engine_->tokenizer(), text, 3),
            std::vector<int32_t>(all.begin(), all.begin() + 3));
  EXPECT_EQ(tokens_from_text(engine_->tokenizer(), text, 0), all);
  EXPECT_THROW(tokens_from_text(engine_->tokenizer(), "", 0), Error);
  EXPECT_THROW(tokens_from_text(engine_->tokenizer(), "x", -1), Error);

  const std::string dir = tmp_path("out");
  const DumpRequest req{.prompt = prompt(5), .greedy = 2};
  const DumpResult r = evaluate(*engine_, req, nullptr);
  write_result(dir, r, req, "m.gguf");
  for (const char* f : {"tokens.npy", "logits.npy", "greedy.npy", "meta.json"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  const std::string logits = slurp(dir + "/logits.npy");
  const std::string h = npy_header("<f4", {6, r.n_vocab});
  ASSERT_EQ(logits.size(), h.size() + r.logits.size() * 4);
  EXPECT_EQ(std::memcmp(logits.data() + h.size(), r.logits.data(), r.logits.size() * 4), 0);
  EXPECT_NE(slurp(dir + "/meta.json").find("\"prompt_len\": 5"), std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(write_result("/proc/nonexistent/x", r, req, "m"), Error);
}

}  // namespace
}  // namespace ds4::dump
