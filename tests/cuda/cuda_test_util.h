// Helpers shared by the CUDA test files: the tiny model paths (DS4_TINY_MODELS overrides the
// build's models dir, for device runs), seeded prompts and the relative L2 distance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace ds4::test {

/// Path of build/models/ds4-tiny-<recipe>.gguf, or of $DS4_TINY_MODELS/ds4-tiny-<recipe>.gguf.
inline std::string tiny_model_path(const char* recipe) {
  const char* dir = std::getenv("DS4_TINY_MODELS");
  return std::string(dir ? dir : DS4_BINARY_DIR "/models") + "/ds4-tiny-" + recipe + ".gguf";
}

/// n pseudo-random token ids below `vocab` (an LCG from `seed`; reproducible everywhere).
inline std::vector<int32_t> prompt_tokens(size_t n, uint32_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % vocab);
  }
  return t;
}

/// ||a - b||_2 / ||b||_2 in f64.
inline double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace ds4::test
