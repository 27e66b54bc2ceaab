// Small f32 vector loops shared by the model units (internal to src/model).
// Written so that GCC/Clang can vectorise them without -ffast-math: reductions keep eight
// independent partial sums (a fixed association, so results do not depend on the ISA).
#pragma once

#include <cmath>
#include <cstddef>

namespace ds4::model::detail {

/// exp(x) and log1p(x) of a float, evaluated in double and rounded once to float: the correctly
/// rounded value (but for doubles within ~1e-16 of a float halfway point) and the CUDA kernels'
/// exp_f / log1p_f exactly, so the two backends round these alike. glibc's expf / log1pf are
/// within ~0.5 ulp and differ from the correctly rounded value in rare halfway cases.
inline float exp_f32(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float log1p_f32(float x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }

/// The logistic 1 / (1 + e^-z) in f32 in the form whose exp cannot overflow: e^z / (1 + e^z)
/// for z < 0 (exp by exp_f32). Used by SiLU (spec §3.5) and the output head's HC weights (§3.6).
inline float sigmoid_f32(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + exp_f32(-z));
  const float e = exp_f32(z);
  return e / (1.0f + e);
}

/// dot(a, b) over n floats, f32 accumulation in 8 interleaved partial sums (lane i sums
/// elements i, i+8, i+16, ...), lanes added pairwise at the end, tail added last.
inline float dot_f32(const float* a, const float* b, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// sum(x[i]^2) over n floats accumulated in double (4 partial sums), as the CPU reference's
/// RMSNorm does (model-spec §3.1: "RMSNorm sums squares in double on CPU").
inline double sum_squares_f64(const float* x, size_t n) {
  double acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t l = 0; l < 4; ++l) acc[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  double s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

/// y[i] += a * x[i].
inline void axpy_f32(float* y, const float* x, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

/// x[i] *= a.
inline void scale_f32(float* x, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

}  // namespace ds4::model::detail
