// Deterministic test data for the CPU backend tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ds4::cpu::testing {

/// n pseudo-normal values (Box-Muller over a 64-bit LCG) times `scale`, reproducible by seed.
inline std::vector<float> gaussian(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (auto& x : v)
    x = scale * static_cast<float>(std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
  return v;
}

/// True when a and b have the same bit pattern.
inline bool same_bits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

}  // namespace ds4::cpu::testing
