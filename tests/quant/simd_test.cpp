// Every SIMD kernel equals the scalar reference bit for bit, on every ISA this machine runs:
// dot products (all weight types), dequantizers and activation quantizers, on random rows of
// many lengths (block counts that are not multiples of the SIMD group, element tails).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/f16.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

using testing::IsaRestore;
using testing::same_bits;

// A finite f16 of random sign with magnitude 2^[lo_exp, hi_exp).
uint16_t random_f16(std::mt19937& rng, int lo_exp, int hi_exp) {
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  std::uniform_int_distribution<int> e(lo_exp, hi_exp - 1);
  const float v = std::ldexp(m(rng), e(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  return f32_to_f16(v);
}

// A weight row of n elements: random bytes everywhere (all codes, grid indices, signs and
// scale bits get exercised) with the scale fields replaced by finite values so no inf/NaN
// reaches the sums.
std::vector<uint8_t> random_weight_row(GgmlType type, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(row_bytes(type, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-8, 8);
  switch (type) {
    case GgmlType::F32: {
      auto* f = reinterpret_cast<float*>(row.data());
      for (int64_t i = 0; i < n; ++i) f[i] = std::ldexp(g(rng), ex(rng));
      break;
    }
    case GgmlType::F16: case GgmlType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(row.data());
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::ldexp(g(rng), ex(rng));
        h[i] = type == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      }
      break;
    }
    case GgmlType::Q8_0:
      for (auto* b = reinterpret_cast<BlockQ8_0*>(row.data()); b != reinterpret_cast<BlockQ8_0*>(row.data() + row.size()); ++b) {
        b->d = random_f16(rng, -12, 2);
      }
      break;
    case GgmlType::Q2_K:
      for (auto* b = reinterpret_cast<BlockQ2_K*>(row.data()); b != reinterpret_cast<BlockQ2_K*>(row.data() + row.size()); ++b) {
        b->d = random_f16(rng, -12, 2);
        b->dmin = random_f16(rng, -12, 2);
      }
      break;
    case GgmlType::Q4_K:
      for (auto* b = reinterpret_cast<BlockQ4_K*>(row.data()); b != reinterpret_cast<BlockQ4_K*>(row.data() + row.size()); ++b) {
        b->d = random_f16(rng, -12, 2);
        b->dmin = random_f16(rng, -12, 2);
      }
      break;
    case GgmlType::IQ2_XXS:
      for (auto* b = reinterpret_cast<BlockIq2Xxs*>(row.data()); b != reinterpret_cast<BlockIq2Xxs*>(row.data() + row.size()); ++b) {
        b->d = random_f16(rng, -12, 2);
      }
      break;
    case GgmlType::MXFP4:
      for (auto* b = reinterpret_cast<BlockMxfp4*>(row.data()); b != reinterpret_cast<BlockMxfp4*>(row.data() + row.size()); ++b) {
        b->e = static_cast<uint8_t>(110 + rng() % 30);
      }
      break;
    default:
      ADD_FAILURE() << "no generator for " << ggml_type_name(type);
  }
  return row;
}

// Activation values with a spread of block magnitudes (including an all-zero block).
std::vector<float> random_activation(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-6, 6);
  std::vector<float> x(static_cast<size_t>(n));
  const float block_scale = std::ldexp(1.0f, ex(rng));
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * block_scale * (1 + (i / 256) % 3);
  if (n >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  return x;
}

std::vector<int64_t> lengths_for(GgmlType type) {
  const int64_t b = testing::block_of(type);
  if (b == 1) return {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 255, 4099};
  if (b == 32) return {0, 32, 64, 7 * 32, 8 * 32, 9 * 32, 15 * 32, 17 * 32, 128 * 32};
  return {0, 256, 512, 768, 16 * 256};
}

class SimdMatchesScalar : public IsaRestore {};

TEST_F(SimdMatchesScalar, DotProducts) {
  std::mt19937 rng(1234);
  for (GgmlType type : testing::weight_types()) {
    for (int64_t n : lengths_for(type)) {
      for (int trial = 0; trial < 3; ++trial) {
        const auto w = random_weight_row(type, n, rng);
        const auto xf = random_activation(n, rng);
        set_isa(Isa::Scalar);
        const auto act = testing::quantize_act(activation_type(type), xf);
        const float expected = vec_dot(type, w.data(), act.data(), n);
        for (Isa isa : testing::runnable_isas()) {
          set_isa(isa);
          const float got = vec_dot(type, w.data(), act.data(), n);
          EXPECT_TRUE(same_bits(got, expected))
              << ggml_type_name(type) << " n=" << n << " " << isa_name(isa) << ": " << got
              << " vs scalar " << expected;
        }
      }
    }
  }
}

TEST_F(SimdMatchesScalar, DotProductsWithExtremeActivationCodes) {
  // Activation codes at +-127 and weight codes at -128 (Q8_0) exercise the sign tricks.
  std::mt19937 rng(99);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q4_K,
                        GgmlType::IQ2_XXS}) {
    const int64_t n = 4096;
    auto w = random_weight_row(type, n, rng);
    if (type == GgmlType::Q8_0) {
      for (auto* b = reinterpret_cast<BlockQ8_0*>(w.data()); b != reinterpret_cast<BlockQ8_0*>(w.data() + w.size()); ++b) {
        for (int i = 0; i < 32; i += 3) b->qs[i] = -128;
      }
    }
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 5 == 0) ? 1.0f : ((i % 5 == 1) ? -1.0f : 0.0f);
    set_isa(Isa::Scalar);
    const auto act = testing::quantize_act(activation_type(type), x);
    const float expected = vec_dot(type, w.data(), act.data(), n);
    for (Isa isa : testing::runnable_isas()) {
      set_isa(isa);
      EXPECT_TRUE(same_bits(vec_dot(type, w.data(), act.data(), n), expected))
          << ggml_type_name(type) << " " << isa_name(isa);
    }
  }
}

TEST_F(SimdMatchesScalar, Dequantizers) {
  std::mt19937 rng(77);
  for (GgmlType type : testing::weight_types()) {
    for (int64_t n : lengths_for(type)) {
      const auto w = random_weight_row(type, n, rng);
      set_isa(Isa::Scalar);
      const auto expected = testing::dequantize(type, w.data(), n);
      for (Isa isa : testing::runnable_isas()) {
        set_isa(isa);
        const auto got = testing::dequantize(type, w.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 4), 0)
            << ggml_type_name(type) << " n=" << n << " " << isa_name(isa);
      }
    }
  }
}

// Rows that stress the activation quantizers: ties for the max, exact .5 products, zero and
// tiny blocks, subnormals, huge values.
std::vector<std::vector<float>> activation_cases() {
  std::vector<std::vector<float>> cases;
  std::mt19937 rng(5);
  for (int t = 0; t < 4; ++t) cases.push_back(random_activation(2048, rng));
  std::vector<float> ties(512, 0.0f);
  ties[3] = 2.0f;
  ties[9] = -2.0f;  // same magnitude: the first (positive) one is the signed max
  ties[300] = -5.0f;
  ties[301] = 5.0f;
  for (int i = 10; i < 40; ++i) ties[i] = 0.5f * (i - 25) / 63.5f * 2.0f;  // .5 products
  cases.push_back(ties);
  std::vector<float> halves(512);
  for (int i = 0; i < 512; ++i) halves[i] = static_cast<float>((i % 255) - 127) + 0.5f;
  cases.push_back(halves);
  std::vector<float> tiny(512);
  for (int i = 0; i < 512; ++i) tiny[i] = (i < 256 ? 1e-38f : 1e-42f) * static_cast<float>(i % 7 - 3);
  cases.push_back(tiny);
  std::vector<float> huge(512);
  for (int i = 0; i < 512; ++i) huge[i] = 3e38f * static_cast<float>(i % 9 - 4) / 4.0f;
  cases.push_back(huge);
  return cases;
}

TEST_F(SimdMatchesScalar, ActivationQuantizers) {
  for (const auto& x : activation_cases()) {
    for (ActType type : {ActType::Q8_0, ActType::Q8_K}) {
      set_isa(Isa::Scalar);
      const auto expected = testing::quantize_act(type, x);
      for (Isa isa : testing::runnable_isas()) {
        set_isa(isa);
        const auto got = testing::quantize_act(type, x);
        EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 4), 0)
            << act_type_name(type) << " " << isa_name(isa);
      }
    }
  }
}

}  // namespace
}  // namespace ds4::quant
