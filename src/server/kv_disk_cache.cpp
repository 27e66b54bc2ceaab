#include "server/kv_disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/error.h"

namespace ds4::server {
namespace {

constexpr double kHalfLifeSeconds = 6 * 3600.0;
constexpr double kMinEffectiveHits = 0.01;

uint64_t now_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void put(std::vector<uint8_t>& out, size_t at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(std::span<const uint8_t> in, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{in[at + i]} << (8 * i);
  return v;
}

bool read_exact(int fd, void* p, size_t n, off_t at) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t got = pread(fd, b, n, at);
    if (got <= 0) return false;
    b += got;
    n -= static_cast<size_t>(got);
    at += got;
  }
  return true;
}

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t put_n = ::write(fd, b, n);
    if (put_n < 0 && errno == EINTR) continue;
    if (put_n <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    b += put_n;
    n -= static_cast<size_t>(put_n);
  }
}

bool is_cache_name(const std::string& name) {
  if (name.size() != 43 || name.substr(40) != ".kv") return false;
  return std::all_of(name.begin(), name.begin() + 40,
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<KvEntry> read_entry(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  uint8_t buf[kKvHeaderBytes];
  struct stat st {};
  const bool ok = read_exact(fd, buf, sizeof buf, 0) && fstat(fd, &st) == 0;
  ::close(fd);
  if (!ok) return std::nullopt;
  auto h = decode_kv_header(buf);
  if (!h || kKvHeaderBytes + h->text_bytes + h->payload_bytes > static_cast<uint64_t>(st.st_size))
    return std::nullopt;
  return KvEntry{path, *h, static_cast<uint64_t>(st.st_size)};
}

}  // namespace

std::vector<uint8_t> encode_kv_header(const KvHeader& h) {
  std::vector<uint8_t> out(kKvHeaderBytes, 0);
  out[0] = 'K';
  out[1] = 'V';
  out[2] = 'C';
  out[3] = 1;
  out[4] = h.quant_bits;
  out[5] = static_cast<uint8_t>(h.reason);
  out[6] = h.flags;
  put(out, 8, h.tokens, 4);
  put(out, 12, h.hits, 4);
  put(out, 16, h.ctx, 4);
  put(out, 24, h.created, 8);
  put(out, 32, h.last_used, 8);
  put(out, 40, h.payload_bytes, 8);
  put(out, 48, h.text_bytes, 4);
  return out;
}

std::optional<KvHeader> decode_kv_header(std::span<const uint8_t> b) {
  if (b.size() < kKvHeaderBytes || b[0] != 'K' || b[1] != 'V' || b[2] != 'C' || b[3] != 1)
    return std::nullopt;
  KvHeader h;
  h.quant_bits = b[4];
  if (h.quant_bits != 2 && h.quant_bits != 4) return std::nullopt;
  h.reason = static_cast<SaveReason>(b[5]);
  h.flags = b[6];
  h.tokens = static_cast<uint32_t>(get(b, 8, 4));
  if (h.tokens == 0) return std::nullopt;
  h.hits = static_cast<uint32_t>(get(b, 12, 4));
  h.ctx = static_cast<uint32_t>(get(b, 16, 4));
  h.created = get(b, 24, 8);
  h.last_used = get(b, 32, 8);
  h.payload_bytes = get(b, 40, 8);
  h.text_bytes = static_cast<uint32_t>(get(b, 48, 4));
  return h;
}

std::vector<uint8_t> encode_ktm(std::span<const ToolBlock> blocks) {
  std::vector<uint8_t> out = {'K', 'T', 'M', 1, 0, 0, 0, 0};
  uint32_t count = 0;
  for (const auto& b : blocks) {
    for (const auto& id : b.ids) {
      const size_t at = out.size();
      out.resize(at + 8);
      put(out, at, id.size(), 4);
      put(out, at + 4, b.dsml.size(), 4);
      out.insert(out.end(), id.begin(), id.end());
      out.insert(out.end(), b.dsml.begin(), b.dsml.end());
      ++count;
    }
  }
  put(out, 4, count, 4);
  return out;
}

std::optional<std::vector<ToolBlock>> decode_ktm(std::span<const uint8_t> b) {
  if (b.size() < 8 || b[0] != 'K' || b[1] != 'T' || b[2] != 'M' || b[3] != 1) return std::nullopt;
  const uint64_t count = get(b, 4, 4);
  std::vector<ToolBlock> out;
  size_t at = 8;
  for (uint64_t i = 0; i < count; ++i) {
    if (b.size() - at < 8) return std::nullopt;
    const uint64_t id_len = get(b, at, 4), dsml_len = get(b, at + 4, 4);
    at += 8;
    if (b.size() - at < id_len || b.size() - at - id_len < dsml_len) return std::nullopt;
    std::string id(reinterpret_cast<const char*>(b.data() + at), id_len);
    std::string dsml(reinterpret_cast<const char*>(b.data() + at + id_len), dsml_len);
    at += id_len + dsml_len;
    auto it = std::find_if(out.begin(), out.end(), [&](const ToolBlock& t) { return t.dsml == dsml; });
    if (it == out.end()) out.push_back({{std::move(id)}, std::move(dsml)});
    else it->ids.push_back(std::move(id));
  }
  return out;
}

std::string sha1_hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr) != 1 || len != 20)
    fail("SHA-1 failed (OpenSSL EVP_Digest)");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

double kv_eviction_score(const KvHeader& h, uint64_t file_bytes, uint64_t now) {
  const uint64_t since = h.last_used ? h.last_used : h.created;
  const double dt = now > since ? static_cast<double>(now - since) : 0.0;
  double eff = h.hits * std::exp2(-dt / kHalfLifeSeconds);
  if (eff < kMinEffectiveHits) eff = 0;
  return (eff + 1.0) * h.tokens / static_cast<double>(std::max<uint64_t>(file_bytes, 1));
}

KvDiskCache::KvDiskCache(KvCacheOptions options) : options_(std::move(options)) {
  if (options_.quant_bits != 2 && options_.quant_bits != 4)
    fail("kv cache: routed-expert quant bits must be 2 or 4, not {}", options_.quant_bits);
  if (options_.min_tokens < 1) fail("kv cache: --kv-cache-min-tokens must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec || !std::filesystem::is_directory(options_.dir))
    fail("kv cache: cannot create {}: {}", options_.dir, ec ? ec.message() : "not a directory");
  ::chmod(options_.dir.c_str(), 0700);
  sweep();
  evict();
}

void KvDiskCache::sweep() {
  DIR* d = ::opendir(options_.dir.c_str());
  if (!d) return;
  std::vector<std::string> doomed;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const size_t tmp = name.find(".kv.tmp.");
    if (tmp == 40 && is_cache_name(name.substr(0, 43))) {
      // A temp file of a writer that died (kill -9 mid-write) or of an earlier process with
      // our pid; a live writer's file is left alone.
      const long pid = std::strtol(name.c_str() + 48, nullptr, 10);
      if (pid <= 0 || pid == ::getpid() || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
        doomed.push_back(name);
    } else if (is_cache_name(name) && !read_entry(options_.dir + "/" + name)) {
      doomed.push_back(name);  // bad header or shorter than its header says: never usable
    }
  }
  ::closedir(d);
  for (const auto& n : doomed) ::unlink((options_.dir + "/" + n).c_str());
}

std::string KvDiskCache::path_for(std::string_view key_text) const {
  return options_.dir + "/" + sha1_hex(key_text) + ".kv";
}

std::vector<KvEntry> KvDiskCache::entries() const {
  std::vector<KvEntry> out;
  DIR* d = ::opendir(options_.dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!is_cache_name(name)) continue;
    if (auto entry = read_entry(options_.dir + "/" + name)) out.push_back(std::move(*entry));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const KvEntry& a, const KvEntry& b) { return a.path < b.path; });
  return out;
}

void KvDiskCache::evict(const std::string& protect) {
  auto all = entries();
  uint64_t total = 0;
  for (const auto& e : all) total += e.file_bytes;
  const uint64_t now = now_seconds();
  while (total > options_.budget_bytes && !all.empty()) {
    size_t worst = all.size();
    double worst_score = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& e = all[i];
      const bool protected_file = e.path == protect && e.file_bytes <= options_.budget_bytes;
      const double s = protected_file ? std::numeric_limits<double>::infinity()
                                      : kv_eviction_score(e.header, e.file_bytes, now);
      const uint64_t used = e.header.last_used ? e.header.last_used : e.header.created;
      const uint64_t worst_used = worst < all.size()
                                      ? (all[worst].header.last_used ? all[worst].header.last_used
                                                                     : all[worst].header.created)
                                      : 0;
      if (worst == all.size() || s < worst_score || (s == worst_score && used < worst_used)) {
        worst = i;
        worst_score = s;
      }
    }
    if (worst_score == std::numeric_limits<double>::infinity()) break;
    ::unlink(all[worst].path.c_str());
    total -= all[worst].file_bytes;
    all.erase(all.begin() + static_cast<long>(worst));
  }
}

bool KvDiskCache::store(std::string_view key_text, uint32_t tokens, std::span<const uint8_t> payload,
                        SaveReason reason, std::span<const ToolBlock> tools) {
  if (static_cast<int64_t>(tokens) < options_.min_tokens || tokens == 0) return false;
  // Only blocks whose bytes are part of the snapshot's text are worth keeping (§4.2).
  std::vector<ToolBlock> kept;
  for (const auto& t : tools)
    if (key_text.find(t.dsml) != std::string_view::npos) kept.push_back(t);
  const std::vector<uint8_t> ktm = kept.empty() ? std::vector<uint8_t>() : encode_ktm(kept);
  const uint64_t size = kKvHeaderBytes + key_text.size() + payload.size() + ktm.size();
  if (static_cast<double>(size) * 1.01 > static_cast<double>(options_.budget_bytes)) return false;
  KvHeader h;
  h.quant_bits = options_.quant_bits;
  h.reason = reason;
  h.tokens = tokens;
  h.ctx = static_cast<uint32_t>(options_.ctx);
  h.created = now_seconds();
  h.payload_bytes = payload.size();
  h.text_bytes = static_cast<uint32_t>(key_text.size());
  if (!ktm.empty()) h.flags |= kKvFlagToolMap;
  const std::string path = path_for(key_text);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  try {
    const auto head = encode_kv_header(h);
    write_all(fd, head.data(), head.size(), tmp);
    write_all(fd, key_text.data(), key_text.size(), tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
    if (!ktm.empty()) write_all(fd, ktm.data(), ktm.size(), tmp);
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: rename failed: {}", path, std::strerror(errno));
  }
  if (const int dfd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  evict(path);
  return true;
}

std::optional<KvHit> KvDiskCache::lookup(std::string_view prompt_text) {
  auto all = entries();
  std::vector<KvEntry> cands;
  for (auto& e : all) {
    const auto& h = e.header;
    if (h.text_bytes > prompt_text.size() || static_cast<int64_t>(h.tokens) < options_.min_tokens ||
        static_cast<int64_t>(h.ctx) > options_.ctx)
      continue;
    if (options_.reject_different_quant && h.quant_bits != options_.quant_bits) continue;
    cands.push_back(std::move(e));
  }
  std::sort(cands.begin(), cands.end(), [](const KvEntry& a, const KvEntry& b) {
    if (a.header.text_bytes != b.header.text_bytes) return a.header.text_bytes > b.header.text_bytes;
    return a.header.tokens > b.header.tokens;
  });
  for (const auto& c : cands) {
    const std::string_view prefix = prompt_text.substr(0, c.header.text_bytes);
    if (options_.dir + "/" + sha1_hex(prefix) + ".kv" != c.path) continue;
    const int fd = ::open(c.path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    KvHit hit;
    hit.text.resize(c.header.text_bytes);
    hit.payload.resize(c.header.payload_bytes);
    hit.tokens = c.header.tokens;
    const bool ok = read_exact(fd, hit.text.data(), hit.text.size(), kKvHeaderBytes) &&
                    read_exact(fd, hit.payload.data(), hit.payload.size(),
                               static_cast<off_t>(kKvHeaderBytes + hit.text.size()));
    const uint64_t ktm_at = kKvHeaderBytes + hit.text.size() + hit.payload.size();
    if (ok && (c.header.flags & kKvFlagToolMap) && c.file_bytes > ktm_at) {
      std::vector<uint8_t> ktm(c.file_bytes - ktm_at);
      if (read_exact(fd, ktm.data(), ktm.size(), static_cast<off_t>(ktm_at))) {
        if (auto t = decode_ktm(ktm)) hit.tools = std::move(*t);  // a bad map only loses replays
      }
    }
    if (!ok || hit.text != prefix) {  // unreadable or a hash collision with other text
      ::close(fd);
      if (!ok) ::unlink(c.path.c_str());
      continue;
    }
    if (static_cast<int64_t>(c.header.tokens) > options_.cold_max_tokens) {
      ::close(fd);
      ::unlink(c.path.c_str());  // consumed: the live session is saved again on evict
    } else {
      std::vector<uint8_t> b(12);
      put(b, 0, c.header.hits + 1, 4);
      put(b, 4, now_seconds(), 8);
      const bool wrote = ::pwrite(fd, b.data(), 4, 12) == 4 && ::pwrite(fd, b.data() + 4, 8, 32) == 8;
      ::close(fd);
      (void)wrote;  // a failed statistics update does not make the snapshot unusable
    }
    return hit;
  }
  return std::nullopt;
}

std::vector<ToolBlock> KvDiskCache::scan_tool_ids(const std::string& dir, const std::vector<std::string>& ids) {
  std::vector<ToolBlock> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (is_cache_name(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    const auto entry = read_entry(path);
    if (!entry || !(entry->header.flags & kKvFlagToolMap)) continue;
    const uint64_t at = kKvHeaderBytes + entry->header.text_bytes + entry->header.payload_bytes;
    if (entry->file_bytes <= at) continue;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::vector<uint8_t> ktm(entry->file_bytes - at);
    const bool ok = read_exact(fd, ktm.data(), ktm.size(), static_cast<off_t>(at));
    ::close(fd);
    if (!ok) continue;
    const auto blocks = decode_ktm(ktm);
    if (!blocks) continue;
    for (const auto& b : *blocks) {
      const bool wanted = std::any_of(b.ids.begin(), b.ids.end(), [&](const std::string& id) {
        return std::find(ids.begin(), ids.end(), id) != ids.end();
      });
      if (wanted) out.push_back(b);
    }
  }
  return out;
}

void KvDiskCache::remove(std::string_view key_text) { ::unlink(path_for(key_text).c_str()); }

}  // namespace ds4::server
