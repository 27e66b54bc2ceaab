// Byte-level BPE merge loop on token ids (spec §6.3).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::tok {

/// The merge table of a byte-level BPE vocabulary, keyed by pairs of token ids. A pre-token piece
/// starts as one symbol per byte (the token of that byte's code point, spec §6.2); the merge loop
/// repeatedly merges the adjacent pair of smallest rank (the leftmost such pair on ties) until no
/// adjacent pair has a rank (spec §6.3). Every symbol is a vocabulary token at every step, so the
/// byte-fallback of spec §6.3 never triggers. Immutable after construction; thread-safe.
class BpeModel {
 public:
  /// A merge: its rank (index in `tokenizer.ggml.merges`) and the id of the merged token.
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  /// Builds the table. `tokens` is the vocabulary (id = index, byte-encoded); `merges` are
  /// `"left right"` strings, rank = index. Throws ds4::Error when a byte has no single-character
  /// token, when a merge string is not two non-empty parts separated by exactly one space, or when
  /// its left part, right part or concatenation is not a token (naming the merge's rank). A repeated
  /// pair keeps its first (lowest) rank. For duplicate token strings the lowest id is used.
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);

  /// Appends the token ids of one pre-token piece (raw bytes, non-empty) to `out`. Uses merge_small
  /// for short pieces and merge_heap for long ones (identical results).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  /// O(n^2) merge loop over an array; fastest for short pieces. Appends to `out`.
  void merge_small(std::string_view piece, std::vector<int32_t>& out) const;

  /// O(n log n) merge loop (linked list + priority queue keyed by (rank, position)). Appends to `out`.
  void merge_heap(std::string_view piece, std::vector<int32_t>& out) const;

  /// The merge of (left, right), or nullptr when the pair has no rank.
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

  /// Id of the token that stands for byte `b` alone.
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }

  /// Number of merges with a rank (distinct pairs).
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pair_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static uint64_t hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 17; }
  void insert(int32_t l, int32_t r, Merge m);

  // Key and value side by side: a lookup touches one cache line (the table is ~4 MB).
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  std::array<int32_t, 256> byte_token_{};
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace ds4::tok
