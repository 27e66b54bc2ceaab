#include "model/kv_quant.h"

#include <bit>
#include <cfloat>
#include <cmath>

#include "common/error.h"
#include "common/f16.h"

namespace ds4::model {
namespace {

constexpr float kFp8AmaxFloor = 1.0e-4f;
constexpr float kFp4AmaxFloor = 7.052966104933725e-38f;  // 6 * 2^-126: scale >= 2^-126

// Round-to-nearest-even of a value in [0, 448] onto the E4M3FN grid. On that grid "even
// index" is "even mantissa", so this is IEEE round-half-even to 3 mantissa bits with
// subnormals below 2^-6: the grid step at ax is step = max(2^-9, 2^(exponent(ax) - 3)), and
// ax / step < 16 is rounded to an integer (ties to even) with the exact 2^23 trick. A carry to
// 16 lands on the next power of two, as it should. Branch-free, so the block loop vectorises.
struct E4m3RoundAbs {
  float operator()(float ax) const {
    constexpr int32_t kMinStepBits = (127 - 9) << 23;  // 2^-9
    const int32_t e = static_cast<int32_t>(std::bit_cast<uint32_t>(ax) & 0x7f800000u) - (3 << 23);
    const int32_t step_bits = e > kMinStepBits ? e : kMinStepBits;
    const float step = std::bit_cast<float>(step_bits);
    const float inv_step = std::bit_cast<float>((254 << 23) - step_bits);  // exact 1 / step
    return ((ax * inv_step + 8388608.0f) - 8388608.0f) * step;
  }
};

// Nearest of {0, .5, 1, 1.5, 2, 3, 4, 6} to a value in [0, 6]; each midpoint goes to the
// neighbour with the even index (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
// Written as a sum of steps (strict '>' where the tie goes down, '>=' where it goes up) so it
// has no branches; the sums of halves are exact.
struct E2m1RoundAbs {
  float operator()(float ax) const {
    return 0.5f * static_cast<float>(ax > 0.25f) + 0.5f * static_cast<float>(ax >= 0.75f) +
           0.5f * static_cast<float>(ax > 1.25f) + 0.5f * static_cast<float>(ax >= 1.75f) +
           1.0f * static_cast<float>(ax > 2.5f) + 1.0f * static_cast<float>(ax >= 3.5f) +
           2.0f * static_cast<float>(ax > 5.0f);
  }
};

// amax of a block; throws when the block holds inf or NaN (the reference's scale would be
// undefined there).
float block_amax(const float* x, size_t n, const char* what) {
  float amax = 0.0f;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    const float av = std::fabs(x[i]);
    finite &= av <= FLT_MAX;
    amax = av > amax ? av : amax;
  }
  if (!finite) fail("{}: block contains inf or NaN", what);
  return amax;
}

// One block: scale = 2^ceil(log2f(max(amax, floor) / qmax)); x -> round(clamp(x / scale)) * scale.
// x / scale is computed as x * (1 / scale): scale is a power of two in [2^-126, 2^127], so
// both are the same exactly rounded quotient. The clamp to +-qmax is applied after rounding
// (round is monotone and round(qmax) = qmax, so min(round(a), qmax) = round(min(a, qmax))),
// comparing bit patterns; written this way GCC keeps the loop branch-free and vectorises it.
template <typename RoundAbs>
void round_trip_block(float* x, size_t n, float amax_floor, float qmax, const char* what) {
  float amax = block_amax(x, n, what);
  if (amax < amax_floor) amax = amax_floor;
  const int e = static_cast<int>(std::ceil(std::log2(amax / qmax)));
  const float scale = std::ldexp(1.0f, e);
  const float inv_scale = std::ldexp(1.0f, -e);
  const RoundAbs round_abs;
  const int32_t qmax_bits = std::bit_cast<int32_t>(qmax);
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] * inv_scale;
    const int32_t q_bits = std::bit_cast<int32_t>(round_abs(std::fabs(v)));
    const uint32_t q = static_cast<uint32_t>(q_bits < qmax_bits ? q_bits : qmax_bits);
    const uint32_t sign = v < 0.0f ? 0x80000000u : 0u;  // as the reference: -0 gives +0
    x[i] = std::bit_cast<float>(q | sign) * scale;
  }
}

}  // namespace

float e4m3fn_value(int index) {
  if (index < 0 || index > 126) fail("e4m3fn_value: index {} outside [0, 126]", index);
  const int e = (index >> 3) & 15;
  const int m = index & 7;
  return e == 0 ? static_cast<float>(m) * 0.001953125f
                : (1.0f + static_cast<float>(m) * 0.125f) * std::ldexp(1.0f, e - 7);
}

float e4m3fn_round(float v) {
  if (std::isnan(v)) fail("e4m3fn_round: NaN input");
  const float q = E4m3RoundAbs{}(std::fmin(std::fabs(v), kE4m3Max));
  return v < 0.0f ? -q : q;
}

float e2m1_value(int index) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (index < 0 || index > 7) fail("e2m1_value: index {} outside [0, 7]", index);
  return kValues[index];
}

float e2m1_round(float v) {
  if (std::isnan(v)) fail("e2m1_round: NaN input");
  const float q = E2m1RoundAbs{}(std::fmin(std::fabs(v), kE2m1Max));
  return v < 0.0f ? -q : q;
}

void fp8_kv_round_trip(std::span<float> x) {
  // Blocks of 64; a trailing shorter block (only in small test shapes: the real model's 448
  // non-RoPE dims are 7 whole blocks) gets its own scale, like every other block.
  for (size_t off = 0; off < x.size(); off += kFp8BlockSize) {
    round_trip_block<E4m3RoundAbs>(x.data() + off, std::min(kFp8BlockSize, x.size() - off),
                                     kFp8AmaxFloor, kE4m3Max, "fp8_kv_round_trip");
  }
}

void hadamard(std::span<float> x) {
  const size_t n = x.size();
  if (n < 2 || n > kMaxHadamardSize || (n & (n - 1)) != 0) {
    fail("hadamard: {} values is not a power of two in [2, {}]", n, kMaxHadamardSize);
  }
  float* v = x.data();
  for (size_t stride = 1; stride < n; stride <<= 1) {
    for (size_t base = 0; base < n; base += 2 * stride) {
      for (size_t i = 0; i < stride; ++i) {
        const float a = v[base + i];
        const float b = v[base + stride + i];
        v[base + i] = a + b;
        v[base + stride + i] = a - b;
      }
    }
  }
  // 1/sqrt(n) rounded once from double: for n = 128 exactly 0.08838834764831845f (spec §3.4.7).
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (size_t i = 0; i < n; ++i) v[i] *= scale;
}

void fp4_round_trip(std::span<float> x) {
  if (x.size() % kFp4BlockSize != 0) {
    fail("fp4_round_trip: {} values are not whole blocks of {}", x.size(), kFp4BlockSize);
  }
  for (size_t off = 0; off < x.size(); off += kFp4BlockSize) {
    round_trip_block<E2m1RoundAbs>(x.data() + off, kFp4BlockSize, kFp4AmaxFloor, kE2m1Max,
                                     "fp4_round_trip");
  }
}

void indexer_qat_row(std::span<float> x) {
  if (x.size() % kFp4BlockSize != 0 || x.size() > kMaxHadamardSize || (x.size() & (x.size() - 1)) != 0) {
    fail("indexer_qat_row: a row of {} values is not a power of two multiple of {}", x.size(),
         kFp4BlockSize);
  }
  block_amax(x.data(), x.size(), "indexer_qat_row");  // reject inf/NaN before mixing them in
  hadamard(x);
  fp4_round_trip(x);
}

}  // namespace ds4::model
