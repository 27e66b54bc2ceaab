#include "tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>

#include "common/error.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/utf8.h"

namespace ds4::tok {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr size_t kSmallPiece = 64;  // above this, merge_heap's O(n log n) wins

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  std::unordered_map<std::string_view, int32_t> index;
  index.reserve(tokens.size() * 2);
  for (size_t id = 0; id < tokens.size(); ++id) index.emplace(tokens[id], static_cast<int32_t>(id));

  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_codepoint(static_cast<uint8_t>(b)));
    auto it = index.find(s);
    if (it == index.end()) fail("tokenizer: the vocabulary has no token for byte 0x{:02X} (expected the string '{}')", b, s);
    byte_token_[b] = it->second;
  }

  size_t cap = 16;
  while (cap < merges.size() * 2 + 16) cap *= 2;
  slots_.assign(cap, Slot{kEmpty, Merge{0, 0}});
  mask_ = cap - 1;

  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos)
      fail("tokenizer: merge {} is '{}', expected two tokens separated by one space", rank, m);
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    auto l = index.find(left), r = index.find(right);
    if (l == index.end()) fail("tokenizer: merge {} ('{}'): left part is not a token", rank, m);
    if (r == index.end()) fail("tokenizer: merge {} ('{}'): right part is not a token", rank, m);
    joined.assign(left).append(right);
    auto j = index.find(joined);
    if (j == index.end()) fail("tokenizer: merge {} ('{}'): the merged string '{}' is not a token", rank, m, joined);
    insert(l->second, r->second, Merge{static_cast<int32_t>(rank), j->second});
  }
}

void BpeModel::insert(int32_t l, int32_t r, Merge m) {
  const uint64_t key = pair_key(l, r);
  for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].key == key) return;  // repeated pair: the first (lowest) rank wins
    if (slots_[i].key == kEmpty) {
      slots_[i] = Slot{key, m};
      ++count_;
      return;
    }
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
  } else if (piece.size() <= kSmallPiece) {
    merge_small(piece, out);
  } else {
    merge_heap(piece, out);
  }
}

void BpeModel::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n0 = piece.size();
  std::vector<int32_t> buf;
  int32_t stack_sym[kSmallPiece], stack_rank[kSmallPiece];
  int32_t *sym = stack_sym, *rank = stack_rank;
  if (n0 > kSmallPiece) {
    buf.resize(2 * n0);
    sym = buf.data();
    rank = buf.data() + n0;
  }
  for (size_t i = 0; i < n0; ++i) sym[i] = byte_token_[static_cast<uint8_t>(piece[i])];
  size_t n = n0;
  auto rank_of = [&](size_t i) {  // rank of the pair (sym[i], sym[i+1])
    const Merge* m = find(sym[i], sym[i + 1]);
    return m ? m->rank : kNoRank;
  };
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;  // strict: the leftmost minimum wins
    if (rank[best] == kNoRank) break;
    sym[best] = find(sym[best], sym[best + 1])->result;
    for (size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
    }
    --n;
    if (best > 0) rank[best - 1] = rank_of(best - 1);
    if (best + 1 < n) rank[best] = rank_of(best);
  }
  out.insert(out.end(), sym, sym + n);
}

void BpeModel::merge_heap(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> sym(n), next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = byte_token_[static_cast<uint8_t>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = find(sym[pos], sym[next[pos]])) heap.push({m->rank, pos, sym[pos], sym[next[pos]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    // Stale entries: the left node was merged away or changed, or its right neighbour changed.
    if (sym[c.pos] != c.left || next[c.pos] < 0 || sym[next[c.pos]] != c.right) continue;
    const int32_t r = next[c.pos];
    sym[c.pos] = find(c.left, c.right)->result;
    sym[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace ds4::tok
