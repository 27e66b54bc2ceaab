// Token sampling from next-token logits: greedy, temperature, top-k, top-p (nucleus), min-p.
// Seeded and reproducible: the same logits, settings and seed give the same token on every
// machine (a portable 64-bit generator, no std::*_distribution whose output is unspecified).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4 {

/// Sampling settings. Defaults are ds4's chat defaults (product-surface §2.1): temp 1, top-p 1,
/// min-p 0.05, top-k 0 (no cap). temp <= 0 means greedy (argmax, ties to the lower id).
struct SamplerSettings {
  float temperature = 1.0f;
  int top_k = 0;         ///< keep the k most likely tokens; 0 = all
  float top_p = 1.0f;    ///< keep the smallest prefix of sorted tokens with mass >= top_p
  float min_p = 0.05f;   ///< keep tokens with p >= min_p * p(top token)
  uint64_t seed = 0;     ///< 0 = seed from the clock (not reproducible)
};

/// Samples token ids from logits. Throws ds4::Error for invalid settings (temperature < 0
/// or > 100, top_p / min_p outside [0, 1], top_k < 0) and for empty or all-NaN logits.
class Sampler {
 public:
  explicit Sampler(const SamplerSettings& settings);

  /// Picks the next token from `logits` (vocab-sized f32; NaN entries are never chosen).
  int32_t sample(std::span<const float> logits);

  /// Argmax with ties to the lowest id (spec §7.8); NaN entries and the id `excluded` (when
  /// >= 0) are skipped. Throws ds4::Error when no entry is left to choose.
  static int32_t argmax(std::span<const float> logits, int32_t excluded = -1);

  const SamplerSettings& settings() const { return settings_; }

 private:
  double next_uniform();  ///< in [0, 1), 53 random bits
  /// A logit below which min-p drops every token, given the top logit (-inf: no cut).
  float min_p_cut(float top) const;

  SamplerSettings settings_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch: (logit, id)
};

}  // namespace ds4
