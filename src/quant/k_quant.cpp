// Reference scale/min search for the Q2_K and Q4_K quantizers (see k_quant.h). Computations run
// in double so inputs near FLT_MAX cannot overflow the error sums.
#include "quant/k_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/f16.h"
#include "quant/scalar_math.h"

namespace ds4::quant::ref {

namespace {

double fit_error(const float* x, int n, int nmax, double scale, double min) {
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    double q = scale > 0.0 ? std::nearbyint((x[i] - min) / scale) : 0.0;
    q = std::clamp(q, 0.0, static_cast<double>(nmax));
    const double e = scale * q + min - x[i];
    err += e * e;
  }
  return err;
}

}  // namespace

ScaleMin fit_scale_min(const float* x, int n, int nmax) {
  double lo = 0.0;
  double hi = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  if (!(hi > lo)) return {0.0f, static_cast<float>(lo)};  // constant block <= 0: q = 0

  double best_scale = (hi - lo) / nmax;
  double best_min = lo;
  double best_err = fit_error(x, n, nmax, best_scale, best_min);
  for (int step = -10; step <= 10; ++step) {
    const double iscale = (nmax + 0.1 * step) / (hi - lo);
    if (iscale <= 0.0) continue;
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const double q = std::clamp(std::nearbyint(iscale * (x[i] - lo)), 0.0,
                                  static_cast<double>(nmax));
      sq += q;
      sqq += q * q;
      sx += x[i];
      sqx += q * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (!(det > 0.0)) continue;  // all codes equal: nothing to fit
    double scale = (n * sqx - sq * sx) / det;
    double min = (sqq * sx - sq * sqx) / det;
    if (min > 0.0) {  // the formats can only subtract: refit the scale alone with min = 0
      min = 0.0;
      scale = sqx / sqq;
    }
    if (!(scale > 0.0)) continue;
    const double err = fit_error(x, n, nmax, scale, min);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
      best_min = min;
    }
  }
  return {static_cast<float>(best_scale), static_cast<float>(best_min)};
}

KBlockCodes quantize_k_block(const float* x, int nsub, int sub_len, int nmax, int ncode) {
  KBlockCodes out{};
  ScaleMin fits[16];
  float max_scale = 0.0f;
  float max_mn = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    fits[j] = fit_scale_min(x + j * sub_len, sub_len, nmax);
    max_scale = std::max(max_scale, fits[j].scale);
    max_mn = std::max(max_mn, -fits[j].min);
  }
  out.d = f32_to_f16(std::min(max_scale / ncode, kF16Max));
  out.dmin = f32_to_f16(std::min(max_mn / ncode, kF16Max));
  const float d = f16_to_f32(out.d);
  const float dmin = f16_to_f32(out.dmin);

  // Candidate codes around the ideal real-valued code, clamped to [0, ncode].
  auto candidates = [ncode](float ideal, int* c) {
    const int base = static_cast<int>(std::floor(std::min(ideal, static_cast<float>(ncode))));
    int k = 0;
    for (int v = base - 1; v <= base + 2; ++v) {
      if (v >= 0 && v <= ncode) c[k++] = v;
    }
    return k;
  };

  for (int j = 0; j < nsub; ++j) {
    const float* xs = x + j * sub_len;
    int sc_c[4], mn_c[4];
    const int nsc = d > 0.0f ? candidates(fits[j].scale / d, sc_c) : (sc_c[0] = 0, 1);
    const int nmn = dmin > 0.0f ? candidates(-fits[j].min / dmin, mn_c) : (mn_c[0] = 0, 1);
    double best_err = std::numeric_limits<double>::infinity();
    for (int a = 0; a < nsc; ++a) {
      for (int b = 0; b < nmn; ++b) {
        // Reconstruct exactly as the dequantizer does: (d*sc)*q - (dmin*mn) in f32.
        const float dl = d * static_cast<float>(sc_c[a]);
        const float ml = dmin * static_cast<float>(mn_c[b]);
        double err = 0.0;
        uint8_t q[32];
        for (int i = 0; i < sub_len; ++i) {
          double qi = dl > 0.0f ? std::nearbyint((static_cast<double>(xs[i]) + ml) / dl) : 0.0;
          qi = std::clamp(qi, 0.0, static_cast<double>(nmax));
          q[i] = static_cast<uint8_t>(qi);
          const double e = static_cast<double>(dl * static_cast<float>(q[i]) - ml) - xs[i];
          err += e * e;
        }
        if (err < best_err) {
          best_err = err;
          out.sc[j] = static_cast<uint8_t>(sc_c[a]);
          out.mn[j] = static_cast<uint8_t>(mn_c[b]);
          for (int i = 0; i < sub_len; ++i) out.q[j * sub_len + i] = q[i];
        }
      }
    }
  }
  return out;
}

}  // namespace ds4::quant::ref
