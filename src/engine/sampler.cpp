#include "engine/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace ds4 {

Sampler::Sampler(const SamplerSettings& s) : settings_(s) {
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f))
    fail("sampling: temperature {} is outside [0, 100]", s.temperature);
  if (!(s.top_p >= 0.0f && s.top_p <= 1.0f)) fail("sampling: top-p {} is outside [0, 1]", s.top_p);
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) fail("sampling: min-p {} is outside [0, 1]", s.min_p);
  if (s.top_k < 0) fail("sampling: top-k {} is negative", s.top_k);
  state_ = s.seed ? s.seed
                  : static_cast<uint64_t>(
                        std::chrono::high_resolution_clock::now().time_since_epoch().count());
}

double Sampler::next_uniform() {
  // splitmix64: tiny, portable, good enough statistical quality for sampling.
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

namespace {

constexpr size_t kArgmaxBlock = 1024;  // logits per block of argmax's first pass

// The largest non-NaN value of p[0, n) other than p[skip] (-inf when there is none): `v > m ?
// v : m` never takes a NaN, and in four-float vectors (16 independent lanes) the loop runs at
// memory speed (~30 us for 129,280 logits, where the one-index loop took ~70-500 us).
float block_max(const float* p, size_t n, size_t skip) {
  float r = -INFINITY;
  size_t i = 0;
  if (skip >= n) {
    using F4 = float __attribute__((vector_size(16)));
    F4 m[4];
    for (F4& v : m) v = F4{} - INFINITY;
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 4; ++j) {
        F4 v;
        std::memcpy(&v, p + i + 4 * j, sizeof v);
        m[j] = v > m[j] ? v : m[j];
      }
    for (const F4& v : m)
      for (int k = 0; k < 4; ++k) r = v[k] > r ? v[k] : r;
  }
  for (; i < n; ++i)
    if (i != skip) r = p[i] > r ? p[i] : r;
  return r;
}

}  // namespace

int32_t Sampler::argmax(std::span<const float> logits, int32_t excluded) {
  // The maximum block by block, remembering the first block that raised it; that block holds
  // the maximum's first index (ties to the lowest id; -0 == +0 ties too). With a maximum of
  // -inf (or nothing but NaN) no block raised it and the search starts at 0.
  const size_t n = logits.size();
  const size_t skip = excluded < 0 ? n : static_cast<size_t>(excluded);
  float top = -INFINITY;
  size_t from = 0;
  for (size_t lo = 0; lo < n; lo += kArgmaxBlock) {
    const size_t len = std::min(kArgmaxBlock, n - lo);
    const float m = block_max(logits.data() + lo, len, skip - lo < len ? skip - lo : len);
    if (m > top) top = m, from = lo;
  }
  for (size_t i = from; i < n; ++i)
    if (logits[i] == top && i != skip) return static_cast<int32_t>(i);
  fail("sampling: no token can be chosen from {} logits (empty, all NaN or excluded)", n);
}

float Sampler::min_p_cut(float top) const {
  // min-p keeps exactly the tokens with exp((l - top) / T) >= min_p (below), i.e. (up to the
  // rounding of exp and log, ~1e-15) those with l >= top + T ln(min_p). The cut sits a relative
  // 1e-6 lower and is rounded down to a float, so it keeps every such token: the candidates only
  // shrink from the whole vocabulary to the few near the top (a default chat sample sorted all
  // 129,280 logits, ~16 ms per token), and the result is the same.
  if (!(settings_.min_p > 0.0f)) return -INFINITY;
  const double span = static_cast<double>(settings_.temperature) * std::log(static_cast<double>(settings_.min_p));
  double bound = static_cast<double>(top) + span;
  bound -= 1e-6 * (std::fabs(bound) + std::fabs(span) + 1.0);
  const float cut = std::nextafter(static_cast<float>(bound), -INFINITY);
  return std::isfinite(cut) ? cut : -INFINITY;  // an infinite top logit: no cut
}

int32_t Sampler::sample(std::span<const float> logits) {
  const int32_t top = argmax(logits);
  if (settings_.temperature <= 0.0f) return top;

  // Candidates sorted by logit, descending (ties: lower id first), cut by top-k.
  candidates_.clear();
  const float cut = min_p_cut(logits[static_cast<size_t>(top)]);
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= cut) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));  // NaN never
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  if (settings_.top_k > 0) keep = std::min(keep, static_cast<size_t>(settings_.top_k));
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                    candidates_.end(), by_logit);
  candidates_.resize(keep);

  // Softmax at temperature in double; the top candidate has weight exp(0) = 1.
  const double inv_t = 1.0 / settings_.temperature;
  const double top_logit = candidates_[0].first;
  std::vector<double> w(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    w[i] = std::exp((candidates_[i].first - top_logit) * inv_t);
    total += w[i];
  }
  // min-p: drop tokens whose probability is below min_p * p(top) (= min_p in relative weight).
  size_t n = keep;
  if (settings_.min_p > 0.0f) {
    size_t m = 1;
    while (m < n && w[m] >= settings_.min_p) ++m;
    n = m;
  }
  // top-p: smallest prefix whose mass reaches top_p of the (min-p filtered) total.
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += w[i];
  if (settings_.top_p < 1.0f) {
    const double target = settings_.top_p * mass;
    double acc = 0.0;
    size_t m = 0;
    while (m < n) {
      acc += w[m++];
      if (acc >= target) break;
    }
    n = std::max<size_t>(m, 1);
    mass = acc;
  }
  (void)total;
  const double r = next_uniform() * mass;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += w[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace ds4
