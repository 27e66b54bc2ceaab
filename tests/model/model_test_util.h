// Helpers shared by the ds4::model unit tests: deterministic random data and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ds4::model::testing {

/// n floats uniform in [lo, hi) from a fixed seed.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// n floats whose magnitudes span many octaves: sign * 2^U(lo_exp, hi_exp) * U(1, 2).
inline std::vector<float> random_wide_vector(size_t n, uint32_t seed, float lo_exp,
                                             float hi_exp) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(lo_exp, hi_exp);
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = (neg(rng) ? -1.0f : 1.0f) * std::ldexp(m(rng), static_cast<int>(e(rng)));
  return v;
}

/// Widens a float vector to double.
inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

/// Expects |got[i] - want[i]| <= abs_tol + rel_tol * |want[i]| for every i.
inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want,
                            double abs_tol, double rel_tol, const char* what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = abs_tol + rel_tol * std::fabs(want[i]);
    ASSERT_NEAR(got[i], want[i], tol) << what << " index " << i;
  }
}

}  // namespace ds4::model::testing
