#include "server/kv_disk_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "server/generator.h"

namespace ds4::server {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("ds4_kv_test_" + std::to_string(::getpid()) + "_" + std::to_string(n_++));
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int n_ = 0;
};

KvCacheOptions opts(const std::string& dir) {
  KvCacheOptions o;
  o.dir = dir;
  o.min_tokens = 2;
  o.cold_max_tokens = 100;
  o.ctx = 1000;
  o.quant_bits = 2;
  o.budget_bytes = 1 << 20;
  return o;
}

TEST(KvDiskCache, Sha1KnownVectors) {
  EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST(KvDiskCache, HeaderLayoutAndRoundTrip) {
  KvHeader h;
  h.quant_bits = 4;
  h.reason = SaveReason::evict;
  h.flags = 0;
  h.tokens = 0x01020304;
  h.hits = 7;
  h.ctx = 32768;
  h.created = 0x1122334455667788ull;
  h.last_used = 9;
  h.payload_bytes = 1000;
  h.text_bytes = 12;
  const auto b = encode_kv_header(h);
  ASSERT_EQ(b.size(), 52u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 3), "KVC");
  EXPECT_EQ(b[3], 1);
  EXPECT_EQ(b[4], 4);
  EXPECT_EQ(b[5], 3);
  EXPECT_EQ(b[8], 0x04);  // little-endian token count
  EXPECT_EQ(b[11], 0x01);
  EXPECT_EQ(b[24], 0x88);
  EXPECT_EQ(b[48], 12);
  const auto d = decode_kv_header(b);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->tokens, h.tokens);
  EXPECT_EQ(d->created, h.created);
  EXPECT_EQ(d->payload_bytes, 1000u);
  auto bad = b;
  bad[4] = 3;  // quant bits must be 2 or 4
  EXPECT_FALSE(decode_kv_header(bad));
  bad = b;
  bad[8] = bad[9] = bad[10] = bad[11] = 0;  // zero tokens
  EXPECT_FALSE(decode_kv_header(bad));
  bad = b;
  bad[0] = 'X';
  EXPECT_FALSE(decode_kv_header(bad));
}

TEST(KvDiskCache, EvictionScoreHandComputed) {
  KvHeader h;
  h.tokens = 1000;
  h.hits = 4;
  h.created = 100;
  h.last_used = 1000;
  // One half-life later: 4 hits -> 2 effective; (2 + 1) * 1000 / 500 = 6.
  EXPECT_DOUBLE_EQ(kv_eviction_score(h, 500, 1000 + 6 * 3600), 6.0);
  // Fresh: (4 + 1) * 1000 / 500.
  EXPECT_DOUBLE_EQ(kv_eviction_score(h, 500, 1000), 10.0);
  // Very old: decayed below 0.01 counts as 0 -> 1000 / 500.
  EXPECT_DOUBLE_EQ(kv_eviction_score(h, 500, 1000 + 60 * 6 * 3600), 2.0);
  h.last_used = 0;  // never used: decay from created
  EXPECT_DOUBLE_EQ(kv_eviction_score(h, 500, 100 + 2 * 6 * 3600), (1.0 + 1.0) * 2.0);
}

TEST(KvDiskCache, StoreLookupLongestPrefixAndHits) {
  TempDir dir;
  KvDiskCache cache(opts(dir.str()));
  const std::vector<uint8_t> p1(100, 1), p2(200, 2);
  ASSERT_TRUE(cache.store("Hello", 3, p1, SaveReason::cold));
  ASSERT_TRUE(cache.store("Hello world", 5, p2, SaveReason::evict));
  EXPECT_FALSE(cache.store("H", 1, p1, SaveReason::cold));  // below min tokens
  EXPECT_TRUE(fs::exists(dir.str() + "/" + sha1_hex("Hello") + ".kv"));
  EXPECT_EQ(fs::file_size(dir.str() + "/" + sha1_hex("Hello") + ".kv"), 52u + 5 + 100);
  auto hit = cache.lookup("Hello world, again");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text, "Hello world");
  EXPECT_EQ(hit->tokens, 5u);
  EXPECT_EQ(hit->payload, p2);
  hit = cache.lookup("Hello there");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text, "Hello");
  EXPECT_FALSE(cache.lookup("Goodbye"));
  EXPECT_FALSE(cache.lookup("Hell"));
  for (const auto& e : cache.entries()) {
    if (e.header.text_bytes == 5) {
      EXPECT_EQ(e.header.hits, 1u);
      EXPECT_GT(e.header.last_used, 0u);
      EXPECT_EQ(e.header.reason, SaveReason::cold);
    }
  }
}

TEST(KvDiskCache, LongSnapshotIsConsumed) {
  TempDir dir;
  auto o = opts(dir.str());
  o.cold_max_tokens = 4;
  KvDiskCache cache(o);
  ASSERT_TRUE(cache.store("abcdef", 6, std::vector<uint8_t>(10, 0), SaveReason::evict));
  EXPECT_TRUE(cache.lookup("abcdefg"));
  EXPECT_TRUE(cache.entries().empty());
}

TEST(KvDiskCache, StrictQuantAndCtxFilters) {
  TempDir dir;
  auto o = opts(dir.str());
  {
    KvDiskCache writer(o);
    ASSERT_TRUE(writer.store("abcdef", 6, std::vector<uint8_t>(10, 0), SaveReason::cold));
  }
  o.quant_bits = 4;
  o.reject_different_quant = true;
  EXPECT_FALSE(KvDiskCache(o).lookup("abcdefg"));
  o.reject_different_quant = false;
  o.ctx = 999;  // snapshot written for ctx 1000
  EXPECT_FALSE(KvDiskCache(o).lookup("abcdefg"));
  o.ctx = 1000;
  EXPECT_TRUE(KvDiskCache(o).lookup("abcdefg"));
}

TEST(KvDiskCache, TruncatedFileIsIgnoredAndBudgetEvictsLowestScore) {
  TempDir dir;
  auto o = opts(dir.str());
  o.budget_bytes = 1000;
  KvDiskCache cache(o);
  ASSERT_TRUE(cache.store("aa", 2, std::vector<uint8_t>(300, 0), SaveReason::cold));   // score 2/354
  ASSERT_TRUE(cache.store("bbbb", 40, std::vector<uint8_t>(300, 0), SaveReason::cold));  // 40/356
  // A third file overflows the budget: the lowest score ("aa") goes, the new file is protected.
  ASSERT_TRUE(cache.store("cc", 2, std::vector<uint8_t>(400, 0), SaveReason::cold));
  std::vector<uint32_t> left;
  for (const auto& e : cache.entries()) left.push_back(e.header.text_bytes);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<uint32_t>{2, 4}));
  EXPECT_FALSE(fs::exists(dir.str() + "/" + sha1_hex("aa") + ".kv"));
  // Too big for the whole budget: not written.
  EXPECT_FALSE(cache.store("dd", 2, std::vector<uint8_t>(990, 0), SaveReason::cold));
  // Truncate a file: it is no longer listed or loaded.
  const std::string path = dir.str() + "/" + sha1_hex("bbbb") + ".kv";
  fs::resize_file(path, 60);
  EXPECT_FALSE(cache.lookup("bbbbx"));
}

TEST(KvPlacementTest, ColdSavePoint) {
  const int32_t U = 7, A = 8;
  KvPlacement p{.cold_max_tokens = 100, .trim_tokens = 2, .align_tokens = 4};
  // Last User before the first Assistant at index 5 (>= min 3).
  const std::vector<int32_t> t = {0, U, 1, 1, 1, U, 1, A, 1, 1, U, 1};
  EXPECT_EQ(ModelGenerator::cold_save_point(t, U, A, 3, p), 5);
  // min 6: falls back to (12 - 2) aligned down to 4 = 8.
  EXPECT_EQ(ModelGenerator::cold_save_point(t, U, A, 6, p), 8);
  // min 9: nothing.
  EXPECT_EQ(ModelGenerator::cold_save_point(t, U, A, 9, p), 0);
  p.align_tokens = 0;
  EXPECT_EQ(ModelGenerator::cold_save_point(t, U, A, 9, p), 10);
}

}  // namespace
}  // namespace ds4::server

namespace ds4::server {
namespace {

// §4.2 KTM section: byte layout, round trip, only blocks inside the key text, lookup returns
// them, a restarted server finds ids by scanning, corrupt maps are rejected.
TEST(KvDiskCache, ToolIdMapSection) {
  const std::vector<ToolBlock> blocks = {{{"call_a", "call_b"}, "<AB>"}, {{"toolu_c"}, "<C>"}};
  const auto ktm = encode_ktm(blocks);
  // "KTM", 1, count 3, then (6, 4, "call_a", "<AB>"), (6, 4, "call_b", "<AB>"), (7, 3, ...).
  ASSERT_EQ(ktm.size(), 8u + (8 + 6 + 4) * 2 + (8 + 7 + 3));
  EXPECT_EQ(std::string(ktm.begin(), ktm.begin() + 4), std::string("KTM\x01", 4));
  EXPECT_EQ(ktm[4], 3);
  EXPECT_EQ(ktm[8], 6);
  EXPECT_EQ(ktm[12], 4);
  EXPECT_EQ(std::string(ktm.begin() + 16, ktm.begin() + 26), "call_a<AB>");
  const auto back = decode_ktm(ktm);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].ids, blocks[0].ids);
  EXPECT_EQ((*back)[0].dsml, "<AB>");
  EXPECT_EQ((*back)[1].ids, blocks[1].ids);
  auto cut = ktm;
  cut.pop_back();
  EXPECT_FALSE(decode_ktm(cut));
  auto bad = ktm;
  bad[3] = 2;
  EXPECT_FALSE(decode_ktm(bad));

  TempDir dir;
  KvDiskCache cache(opts(dir.str()));
  const std::vector<uint8_t> payload(50, 7);
  ASSERT_TRUE(cache.store("history <AB> more", 4, payload, SaveReason::continued, blocks));
  const auto entries = cache.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].header.flags, kKvFlagToolMap);
  EXPECT_EQ(entries[0].header.reason, SaveReason::continued);
  // Only the block whose DSML is in the text was written.
  EXPECT_EQ(entries[0].file_bytes, 52u + 17 + 50 + 8 + 2 * (8 + 6 + 4));
  const auto hit = cache.lookup("history <AB> more and more");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->payload, payload);
  ASSERT_EQ(hit->tools.size(), 1u);
  EXPECT_EQ(hit->tools[0].ids, blocks[0].ids);
  const auto found = KvDiskCache::scan_tool_ids(dir.str(), {"call_b", "nope"});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].dsml, "<AB>");
  EXPECT_TRUE(KvDiskCache::scan_tool_ids(dir.str(), {"toolu_c"}).empty());
  // Without tools no flag and no section.
  ASSERT_TRUE(cache.store("plain text", 4, payload, SaveReason::cold));
  for (const auto& e : cache.entries()) {
    if (e.header.text_bytes == 10) {
      EXPECT_EQ(e.header.flags, 0);
    }
  }
}

TEST(KvDiskCache, CrashLeftoversAreSweptAtOpen) {
  TempDir dir;
  { KvDiskCache cache(opts(dir.str())); }
  const std::string name = sha1_hex("x");
  auto touch = [&](const std::string& n, const std::string& bytes) {
    std::ofstream(dir.str() + "/" + n, std::ios::binary) << bytes;
  };
  touch(name + ".kv.tmp.999999999", "partial");                        // dead writer
  touch(name + ".kv.tmp." + std::to_string(::getppid()), "partial");    // live writer: kept
  touch(sha1_hex("y") + ".kv", "KVC");                                 // truncated header
  KvDiskCache cache(opts(dir.str()));
  EXPECT_FALSE(fs::exists(dir.str() + "/" + name + ".kv.tmp.999999999"));
  EXPECT_TRUE(fs::exists(dir.str() + "/" + name + ".kv.tmp." + std::to_string(::getppid())));
  EXPECT_FALSE(fs::exists(dir.str() + "/" + sha1_hex("y") + ".kv"));
}

TEST(KvPlacementTest, ContinuedSaveStep) {
  EXPECT_EQ(continued_save_step(10000, 2048), 10240);
  EXPECT_EQ(continued_save_step(4096, 2048), 4096);
  EXPECT_EQ(continued_save_step(100, 0), 100);
  EXPECT_EQ(continued_save_step(0, 2048), 0);
}

}  // namespace
}  // namespace ds4::server
