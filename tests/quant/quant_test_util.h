// Helpers shared by the ds4::quant tests: seeded random data, typed row buffers, the list of
// ISAs this machine can run, and a fixture that restores the active ISA.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/f16.h"
#include "quant/quant.h"

namespace ds4::quant::testing {

/// n samples of N(0, sigma) from a fixed seed.
inline std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Quantizes x with the reference quantizer of `type` into a fresh byte buffer.
inline std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

/// Dequantizes n elements of `type` from `q`.
inline std::vector<float> dequantize(GgmlType type, const void* q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(type, q, y.data(), n);
  return y;
}

/// Quantizes x to activation format `type` into a fresh (suitably aligned) buffer.
inline std::vector<uint32_t> quantize_act(ActType type, const std::vector<float>& x) {
  const size_t bytes = act_row_bytes(type, static_cast<int64_t>(x.size()));
  std::vector<uint32_t> buf((bytes + 3) / 4);
  quantize_activation(type, x.data(), buf.data(), static_cast<int64_t>(x.size()));
  return buf;
}

/// The ISAs this machine can run, scalar first.
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

/// Bitwise equality of two floats (distinguishes -0 and +0).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// Restores the ISA that was active before the test.
class IsaRestore : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = active_isa(); }
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = Isa::Scalar;
};

/// The weight types of vec_dot/matvec.
inline const std::vector<GgmlType>& weight_types() {
  static const std::vector<GgmlType> types = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                              GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K,
                                              GgmlType::IQ2_XXS, GgmlType::MXFP4};
  return types;
}

/// Block size of a type.
inline int64_t block_of(GgmlType type) {
  return ggml_type_info(static_cast<uint32_t>(type))->block_elems;
}

}  // namespace ds4::quant::testing
