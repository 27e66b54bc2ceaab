// Reference IQ2_XXS quantizer (spec §5.5). Good enough to generate test models, not tuned for
// quality (no importance weights). Per group of 8 elements the stored magnitudes come from one
// of 256 grid points and the signs from a mask with an even number of negatives; per
// sub-block of 32 one 4-bit scale ls; per block one f16 d. Element value
// = d * (0.5 + ls) * 0.25 * grid * sign.
//
// Method:
// 1. Signs: take the signs of x; if a group has an odd number of negatives, flip the sign of
//    its smallest-magnitude element (its target magnitude becomes -|x|, costing the least).
// 2. Per sub-block, search a real scale s: for each candidate s = max|x| / t (t = 6 .. 50) pick
//    the nearest grid point of every group (minimizing s^2 |g|^2 - 2 s <a, g>), refit s by least
//    squares on those points, keep the lowest error.
// 3. d = max s * 8 / 31 (so ls = 15 reaches the largest s), rounded to f16 and clamped to
//    65504; per sub-block the ls in {round - 1 .. round + 1} with the lowest error, with the grid
//    points re-chosen for the coded scale.
// Achieved error (tests/quant/roundtrip_test.cpp): RMS error 0.32x the RMS of the data for
// Gaussian and for uniform rows; a constant row is reproduced to f16 precision. Cost: about
// 1 ms per 256 elements (fine for test models, too slow for converting a full checkpoint).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/f16.h"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/reference.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

namespace {

struct Group {
  double target[8];  // magnitudes to approximate (one may be negative after the parity fix)
  uint8_t mask;      // sign mask, even popcount
  double dots[256];  // <target, grid point e>
};

struct SubFit {
  double err;       // squared error relative to sum(target^2)
  uint8_t index[4];
};

Group make_group(const float* x) {
  Group g{};
  int smallest = 0;
  for (int j = 0; j < 8; ++j) {
    g.target[j] = std::fabs(static_cast<double>(x[j]));
    if (x[j] < 0.0f) g.mask = static_cast<uint8_t>(g.mask | (1u << j));
    if (g.target[j] < g.target[smallest]) smallest = j;
  }
  if (std::popcount(static_cast<unsigned>(g.mask)) & 1) {
    g.mask = static_cast<uint8_t>(g.mask ^ (1u << smallest));
    g.target[smallest] = -g.target[smallest];
  }
  for (int e = 0; e < 256; ++e) {
    double s = 0.0;
    for (int j = 0; j < 8; ++j) {
      s += g.target[j] * static_cast<double>((kIq2xxs.grid[e] >> (8 * j)) & 0xff);
    }
    g.dots[e] = s;
  }
  return g;
}

// Nearest grid point of every group of a sub-block for the scale s > 0.
SubFit assign(const Group* groups, double s) {
  SubFit f{0.0, {}};
  for (int k = 0; k < 4; ++k) {
    double best = std::numeric_limits<double>::infinity();
    for (int e = 0; e < 256; ++e) {
      const double err = s * s * kIq2xxs.norm2[e] - 2.0 * s * groups[k].dots[e];
      if (err < best) {
        best = err;
        f.index[k] = static_cast<uint8_t>(e);
      }
    }
    f.err += best;
  }
  return f;
}

// Best real-valued scale of one sub-block (0 when its targets are all zero).
double search_scale(const Group* groups) {
  double amax = 0.0;
  for (int k = 0; k < 4; ++k) {
    for (double t : groups[k].target) amax = std::max(amax, t);
  }
  if (amax == 0.0) return 0.0;
  double best_s = amax / 43.0;
  double best_err = assign(groups, best_s).err;
  for (int t = 6; t <= 50; ++t) {
    const double s0 = amax / t;
    const SubFit f = assign(groups, s0);
    if (f.err < best_err) {
      best_err = f.err;
      best_s = s0;
    }
    double num = 0.0, den = 0.0;  // least-squares refit on the chosen points
    for (int k = 0; k < 4; ++k) {
      num += groups[k].dots[f.index[k]];
      den += kIq2xxs.norm2[f.index[k]];
    }
    const double s1 = num / den;
    if (s1 > 0.0) {
      const double err = assign(groups, s1).err;
      if (err < best_err) {
        best_err = err;
        best_s = s1;
      }
    }
  }
  return best_s;
}

// `groups` is scratch for the 32 groups of the block (~67 KB, kept off the stack).
void quantize_block(const float* x, BlockIq2Xxs* y, Group* groups) {
  double scales[8];
  double smax = 0.0;
  for (int k = 0; k < 8; ++k) {
    for (int g = 0; g < 4; ++g) groups[4 * k + g] = make_group(x + 32 * k + 8 * g);
    scales[k] = search_scale(groups + 4 * k);
    smax = std::max(smax, scales[k]);
  }
  std::memset(y, 0, sizeof(*y));
  y->d = f32_to_f16(static_cast<float>(std::min(smax * 8.0 / 31.0, double{kF16Max})));
  const float d = f16_to_f32(y->d);
  for (int k = 0; k < 8; ++k) {
    int best_ls = 0;
    SubFit best{std::numeric_limits<double>::infinity(), {}};
    if (d > 0.0f) {
      const int center = static_cast<int>(
          std::nearbyint(std::clamp((8.0 * scales[k] / d - 1.0) / 2.0, 0.0, 15.0)));
      for (int ls = std::max(0, center - 1); ls <= std::min(15, center + 1); ++ls) {
        // The scale per grid unit exactly as the dequantizer computes it.
        const float db = d * (0.5f + static_cast<float>(ls)) * 0.25f;
        const SubFit f = assign(groups + 4 * k, db);
        if (f.err < best.err) {
          best = f;
          best_ls = ls;
        }
      }
    } else {
      best = SubFit{0.0, {0, 0, 0, 0}};
    }
    uint32_t a0 = 0;
    uint32_t a1 = static_cast<uint32_t>(best_ls) << 28;
    for (int g = 0; g < 4; ++g) {
      a0 |= static_cast<uint32_t>(best.index[g]) << (8 * g);
      // The sign index is the low 7 bits of the (even-parity) mask: bit 7 follows from parity.
      a1 |= static_cast<uint32_t>(groups[4 * k + g].mask & 127) << (7 * g);
    }
    y->qs[4 * k + 0] = static_cast<uint16_t>(a0 & 0xffff);
    y->qs[4 * k + 1] = static_cast<uint16_t>(a0 >> 16);
    y->qs[4 * k + 2] = static_cast<uint16_t>(a1 & 0xffff);
    y->qs[4 * k + 3] = static_cast<uint16_t>(a1 >> 16);
  }
}

}  // namespace

void quantize_iq2_xxs(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockIq2Xxs*>(dst);
  std::vector<Group> groups(32);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block(src + b * kQK_K, blocks + b, groups.data());
}

}  // namespace ds4::quant::ref
