// Internal to the tokenizer: the per-call memo of pre-token piece -> token ids.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace ds4::tok {

/// Open-addressing map from a piece (a view into the text being encoded, which outlives the cache)
/// to its token ids, stored in one pool. Prose repeats most words, so most pieces skip BPE. One per
/// encode call; not thread-safe.
class PieceCache {
 public:
  /// Ids of `piece` if cached: sets `ids`/`count` into the pool and returns true.
  bool find(std::string_view piece, const int32_t*& ids, uint32_t& count) const {
    if (slots_.empty()) return false;
    const uint64_t h = hash(piece);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.data == nullptr) return false;
      if (s.hash == h && s.size == piece.size() && std::memcmp(s.data, piece.data(), piece.size()) == 0) {
        ids = pool_.data() + s.offset;
        count = s.count;
        return true;
      }
    }
  }

  /// Sizes the table for about `pieces` distinct pieces (small texts get a small table).
  void reserve(size_t pieces) {
    size_t n = 16;
    while (n < 2 * pieces && n < (size_t{1} << 16)) n *= 2;
    if (n > slots_.size()) rehash(n);
  }

  /// Remembers `piece` -> ids[0..count) (piece must not be cached yet).
  void insert(std::string_view piece, const int32_t* ids, uint32_t count) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    const uint64_t h = hash(piece);
    Slot s{piece.data(), static_cast<uint32_t>(piece.size()), static_cast<uint32_t>(pool_.size()), count, h};
    pool_.insert(pool_.end(), ids, ids + count);
    place(s);
    ++used_;
  }

 private:
  struct Slot {
    const char* data = nullptr;
    uint32_t size = 0, offset = 0, count = 0;
    uint64_t hash = 0;
  };

  // 8 bytes at a time, multiply-xorshift mixing: fast for the short pieces cached here.
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
  }

  void place(const Slot& s) {
    size_t i = s.hash & mask_;
    while (slots_[i].data != nullptr) i = (i + 1) & mask_;
    slots_[i] = s;
  }

  void grow() { rehash(slots_.empty() ? 16 : slots_.size() * 2); }

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    for (const Slot& s : old)
      if (s.data != nullptr) place(s);
  }

  std::vector<Slot> slots_;
  std::vector<int32_t> pool_;
  size_t mask_ = 0, used_ = 0;
};

}  // namespace ds4::tok
