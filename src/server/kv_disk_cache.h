// Disk KV cache of ds4-server (product-surface §4): snapshots of a session prefix in
// `<dir>/<sha1 of key text>.kv`, KVC header + key text + DSV4 session payload (Session::save),
// written atomically, found by the longest key text that prefixes a new prompt, evicted by score.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_memory.h"

namespace ds4::server {

/// Why a snapshot was written (header byte 5).
enum class SaveReason : uint8_t { unknown = 0, cold = 1, continued = 2, evict = 3, shutdown = 4 };

/// Options (ds4-server --kv-* flags).
struct KvCacheOptions {
  std::string dir;                 ///< created (mode 0700) when missing
  uint64_t budget_bytes = 4096ull << 20;
  int64_t min_tokens = 512;        ///< shorter prefixes are neither saved nor loaded
  int64_t cold_max_tokens = 30000; ///< loading a longer snapshot consumes (deletes) it
  bool reject_different_quant = false;
  uint8_t quant_bits = 2;          ///< routed-expert quantization of the running model: 2 or 4
  int64_t ctx = 0;                 ///< context of the running session
};

/// The fixed 52-byte header of a .kv file (§4.2, little-endian).
struct KvHeader {
  uint8_t quant_bits = 0;
  SaveReason reason = SaveReason::unknown;
  uint8_t flags = 0;
  uint32_t tokens = 0;
  uint32_t hits = 0;
  uint32_t ctx = 0;
  uint64_t created = 0;    ///< unix seconds
  uint64_t last_used = 0;  ///< unix seconds, 0 = never
  uint64_t payload_bytes = 0;
  uint32_t text_bytes = 0;
};

inline constexpr size_t kKvHeaderBytes = 52;

/// Serialises `h` (magic "KVC", version 1) into 52 bytes.
std::vector<uint8_t> encode_kv_header(const KvHeader& h);
/// Parses 52 header bytes. Returns nullopt for a wrong magic/version, quant bits other than 2 or
/// 4, or a token count of 0.
std::optional<KvHeader> decode_kv_header(std::span<const uint8_t> bytes);

/// Lowercase hex SHA-1 of `text` (OpenSSL EVP). Throws ds4::Error if OpenSSL fails.
std::string sha1_hex(std::string_view text);

/// Eviction score (§4.4): (effective_hits + 1) * tokens / file_bytes with effective_hits =
/// hits * 2^(-(now - last_used or created) / 6 h), values below 0.01 counted as 0.
double kv_eviction_score(const KvHeader& h, uint64_t file_bytes, uint64_t now);

/// Header flag bit 0: a KTM (tool-id map) section follows the payload.
inline constexpr uint8_t kKvFlagToolMap = 1;

/// The KTM section (§4.2): "KTM", version 1, u32 entry count, then per id: u32 id length, u32
/// DSML length, id bytes, DSML bytes (ids of one block repeat its DSML).
std::vector<uint8_t> encode_ktm(std::span<const ToolBlock> blocks);
/// Parses a KTM section back into blocks (entries with equal DSML form one block, ids in entry
/// order). nullopt for a bad magic/version or lengths past the end.
std::optional<std::vector<ToolBlock>> decode_ktm(std::span<const uint8_t> bytes);

/// One file of the cache.
struct KvEntry {
  std::string path;
  KvHeader header;
  uint64_t file_bytes = 0;
};

/// A loaded snapshot: the key text it was saved for and the DSV4 payload.
struct KvHit {
  std::string text;
  uint32_t tokens = 0;
  std::vector<uint8_t> payload;
  std::vector<ToolBlock> tools;  ///< the file's KTM section (empty without one)
};

/// The cache folder. Not thread-safe (the core's worker is its only user).
class KvDiskCache {
 public:
  /// Creates the folder if needed, removes what a crashed writer left (temp files of dead
  /// processes, `.kv` files whose header is invalid or that are shorter than it says) and evicts
  /// down to the budget. Throws ds4::Error when the
  /// folder cannot be created or the options are invalid (quant bits, min tokens < 1).
  explicit KvDiskCache(KvCacheOptions options);

  /// Writes a snapshot of `tokens` tokens whose decoded text is `key_text` (to `<name>.tmp.<pid>`,
  /// fsync, rename, fsync of the folder), replacing a file of the same name, then evicts.
  /// Returns false (nothing written) when tokens < min_tokens or the file would not fit the
  /// budget with 1% headroom. Throws ds4::Error on an I/O failure.
  bool store(std::string_view key_text, uint32_t tokens, std::span<const uint8_t> payload,
             SaveReason reason, std::span<const ToolBlock> tools = {});

  /// The longest valid snapshot whose key text is a prefix of `prompt_text` (ties: more
  /// tokens), with tokens >= min_tokens, ctx <= the running ctx and, in strict mode, the same
  /// quant bits. The text is re-checked byte for byte. A hit with more tokens than
  /// cold_max_tokens is consumed (deleted); otherwise its hit count and last-used time are
  /// updated in place. Unreadable files are deleted and skipped.
  std::optional<KvHit> lookup(std::string_view prompt_text);

  /// The tool blocks of every file's KTM section that hold one of `ids` (§3.9: before rendering,
  /// a restarted server learns the exact DSML of tool calls it sampled before). Reads only;
  /// safe from any thread while the worker writes (files are replaced by rename).
  static std::vector<ToolBlock> scan_tool_ids(const std::string& dir, const std::vector<std::string>& ids);

  /// Deletes a snapshot (e.g. its payload did not load).
  void remove(std::string_view key_text);

  /// Every valid file, for tests and stats.
  std::vector<KvEntry> entries() const;
  /// Deletes the lowest-scoring files until the total fits the budget; `protect` (a path) is
  /// kept unless it alone exceeds the budget.
  void evict(const std::string& protect = {});

  const KvCacheOptions& options() const { return options_; }

 private:
  std::string path_for(std::string_view key_text) const;
  void sweep();
  KvCacheOptions options_;
};

}  // namespace ds4::server
