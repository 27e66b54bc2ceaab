#include "engine/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

int32_t Sampler::argmax(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  if (best < 0) fail("sampling: logits are empty or all NaN");
  return best;
}

int32_t Sampler::sample(std::span<const float> logits) {
  const int32_t top = argmax(logits);
  if (settings_.temperature <= 0.0f) return top;

  // Candidates sorted by logit, descending (ties: lower id first), cut by top-k.
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i])) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
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
