// MXFP4 tables, derived at compile time from the E2M1 and E8M0 definitions (OCP Microscaling
// Formats v1.0), in ggml's element order and scaling (checked against ggml-common.h/-impl.h).
#include "quant/mxfp4_tables.h"

#include <bit>

namespace ds4::quant {

namespace {

constexpr Mxfp4Tables make_tables() {
  Mxfp4Tables t{};
  constexpr int8_t kPositive[8] = {0, 1, 2, 3, 4, 6, 8, 12};  // 2 x {0, .5, 1, 1.5, 2, 3, 4, 6}
  for (int c = 0; c < 8; ++c) {
    t.doubled[c] = kPositive[c];
    t.doubled[c + 8] = static_cast<int8_t>(-kPositive[c]);
  }
  for (int e = 0; e < 256; ++e) {
    // 2^(e-128): a normal float for e >= 2 (biased exponent e - 1), else a subnormal.
    const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
    t.half_scale[e] = std::bit_cast<float>(bits);
  }
  return t;
}

}  // namespace

constinit const Mxfp4Tables kMxfp4 = make_tables();

}  // namespace ds4::quant
