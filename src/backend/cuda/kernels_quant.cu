// Activation quantizers and the one grouped matvec kernel, templated on the weight format.
// Every dot reproduces quant::ref (src/quant/*.cpp) exactly: the same lane partition and
// reduction tree for F32/F16/BF16 (16 lanes) and Q8_0/MXFP4 (8 lanes), the same in-order block
// sum for Q2_K/Q4_K/IQ2_XXS, exact integer block dots, f32 scale products in the same order.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace ds4::cuda {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ2_K = 10, kQ4_K = 12, kIQ2_XXS = 16,
                   kBF16 = 30, kMXFP4 = 39;
constexpr unsigned kFull = 0xffffffffu;

// Block layouts of src/quant/blocks.h (byte-identical structs).
struct BQ8_0 { uint16_t d; int8_t qs[32]; };
struct BQ8_0Act { float d; int8_t qs[32]; };
struct BQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct BQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BIq2 { uint16_t d; uint16_t qs[32]; };
struct BMxfp4 { uint8_t e; uint8_t qs[16]; };
struct BQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(BQ8_0) == 34 && sizeof(BQ8_0Act) == 36 && sizeof(BQ2_K) == 84 &&
              sizeof(BQ4_K) == 144 && sizeof(BIq2) == 66 && sizeof(BMxfp4) == 17 &&
              sizeof(BQ8_K) == 292);

__constant__ uint64_t c_iq2_grid[256];
__constant__ uint8_t c_iq2_signs[128];
__constant__ int8_t c_mx_doubled[16];
__constant__ float c_mx_half[256];

__device__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// quant::ref::round_clamp_i8: saturate (NaN -> -128), then round half to even.
__device__ int8_t round_clamp_i8(float v) {
  float c = v > -128.0f ? v : -128.0f;
  c = c < 127.0f ? c : 127.0f;
  return static_cast<int8_t>(__float2int_rn(c));
}

// One thread per 32-value block (quant::ref::quantize_q8_0_act).
__global__ void quant_q8_0_kernel(const float* x, int64_t x_stride, int64_t cols, int rows,
                                  uint8_t* act, size_t act_bytes) {
  const int64_t nb = cols / 32;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= nb * rows) return;
  const int64_t r = i / nb, b = i % nb;
  const float* xb = x + r * x_stride + b * 32;
  BQ8_0Act* out = reinterpret_cast<BQ8_0Act*>(act + r * act_bytes) + b;
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float ax = fabsf(xb[j]);
    if (ax > amax) amax = ax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (isinf(id)) {
    out->d = 0.0f;
    for (int j = 0; j < 32; ++j) out->qs[j] = 0;
    return;
  }
  out->d = d;
  for (int j = 0; j < 32; ++j) out->qs[j] = round_clamp_i8(xb[j] * id);
}

// One thread per 256-value block (quant::ref::quantize_q8_k).
__global__ void quant_q8_k_kernel(const float* x, int64_t x_stride, int64_t cols, int rows,
                                  uint8_t* act, size_t act_bytes) {
  const int64_t nb = cols / 256;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= nb * rows) return;
  const int64_t r = i / nb, b = i % nb;
  const float* xb = x + r * x_stride + b * 256;
  BQ8_K* y = reinterpret_cast<BQ8_K*>(act + r * act_bytes) + b;
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 256; ++j) {
    const float ax = fabsf(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
  if (amax == 0.0f || isinf(iscale)) {
    y->d = 0.0f;
    for (int j = 0; j < 256; ++j) y->qs[j] = 0;
    for (int g = 0; g < 16; ++g) y->bsums[g] = 0;
    return;
  }
  for (int j = 0; j < 256; ++j) y->qs[j] = round_clamp_i8(iscale * xb[j]);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += y->qs[16 * g + j];
    y->bsums[g] = static_cast<int16_t>(sum);
  }
  y->d = 1.0f / iscale;
}

// --- per-format dots: every lane of the warp calls; lane 0 holds the result -----------------

template <uint32_t T>
__device__ float load_w(const uint8_t* w, int64_t i) {
  if constexpr (T == kF32) return reinterpret_cast<const float*>(w)[i];
  else if constexpr (T == kF16) return h2f(reinterpret_cast<const uint16_t*>(w)[i]);
  else return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[i]) << 16);
}

// F32/F16/BF16: element i into lane i mod 16, tree (l, l+8), (l, l+4), (l, l+2), (0, 1).
template <uint32_t T>
__device__ float dot_float(const uint8_t* w, const float* x, int64_t n, int lane) {
  float acc = 0.0f;
  if (lane < 16)
    for (int64_t base = 0; base < n; base += 16) {
      const int64_t i = base + lane;
      const float p = i < n ? load_w<T>(w, i) * x[i] : 0.0f;
      acc = acc + p;
    }
  for (int off = 8; off >= 1; off >>= 1) acc = acc + __shfl_down_sync(kFull, acc, off);
  return acc;
}

__device__ int mx_code(const BMxfp4& b, int j) { return j < 16 ? (b.qs[j] & 15) : (b.qs[j - 16] >> 4); }

// Q8_0/MXFP4: block b into lane b mod 8, tree (l, l+4), (l, l+2), (0, 1).
template <uint32_t T>
__device__ float dot_q8_lanes(const uint8_t* w, const uint8_t* act, int64_t n, int lane) {
  const auto* xb = reinterpret_cast<const BQ8_0Act*>(act);
  const int64_t nb = n / 32;
  float acc = 0.0f;
  if (lane < 8)
    for (int64_t b = lane; b < nb; b += 8) {
      int32_t isum = 0;
      float s;
      if constexpr (T == kQ8_0) {
        const BQ8_0& wb = reinterpret_cast<const BQ8_0*>(w)[b];
        for (int j = 0; j < 32; ++j) isum += static_cast<int32_t>(wb.qs[j]) * xb[b].qs[j];
        const float scale = h2f(wb.d) * xb[b].d;
        s = scale * static_cast<float>(isum);
      } else {
        const BMxfp4& wb = reinterpret_cast<const BMxfp4*>(w)[b];
        for (int j = 0; j < 32; ++j) isum += c_mx_doubled[mx_code(wb, j)] * xb[b].qs[j];
        s = (c_mx_half[wb.e] * xb[b].d) * static_cast<float>(isum);
      }
      acc = acc + s;
    }
  for (int off = 4; off >= 1; off >>= 1) acc = acc + __shfl_down_sync(kFull, acc, off);
  return acc;
}

__device__ float block_q2_k(const BQ2_K& x, const BQ8_K& y) {
  int32_t summs = 0;
  for (int j = 0; j < 16; ++j) summs += y.bsums[j] * (x.scales[j] >> 4);
  int32_t isum = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t sub = 0;
    for (int t = 0; t < 16; ++t) {
      const int i = 16 * j + t;
      const int k = i / 128, s = (i % 128) / 32, l = i % 32;
      sub += ((x.qs[32 * k + l] >> (2 * s)) & 3) * y.qs[i];
    }
    isum += (x.scales[j] & 15) * sub;
  }
  const float dall = y.d * h2f(x.d);
  const float dmin = y.d * h2f(x.dmin);
  return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

__device__ float block_q4_k(const BQ4_K& x, const BQ8_K& y) {
  int32_t isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    const uint8_t* s = x.scales;
    if (j < 4) {
      sc = s[j] & 63;
      mn = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
      mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    summs += mn * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    int32_t sub = 0;
    for (int t = 0; t < 32; ++t) {
      const int i = 32 * j + t;
      const int code = (x.qs[32 * (j / 2) + i % 32] >> (4 * (j & 1))) & 15;
      sub += code * y.qs[i];
    }
    isum += sc * sub;
  }
  const float dall = y.d * h2f(x.d);
  const float dmin = y.d * h2f(x.dmin);
  return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

__device__ float block_iq2(const BIq2& x, const BQ8_K& y) {
  int32_t bsum = 0;
  for (int k = 0; k < 8; ++k) {
    const uint16_t* q = x.qs + 4 * k;
    const uint32_t a0 = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
    const uint32_t a1 = static_cast<uint32_t>(q[2]) | (static_cast<uint32_t>(q[3]) << 16);
    int32_t sumi = 0;
    for (int g = 0; g < 4; ++g) {
      const uint64_t grid = c_iq2_grid[(a0 >> (8 * g)) & 0xff];
      const uint8_t signs = c_iq2_signs[(a1 >> (7 * g)) & 127];
      for (int j = 0; j < 8; ++j) {
        const int v = static_cast<int>((grid >> (8 * j)) & 0xff) * y.qs[32 * k + 8 * g + j];
        sumi += (signs >> j) & 1 ? -v : v;
      }
    }
    bsum += sumi * static_cast<int32_t>(2 * (a1 >> 28) + 1);
  }
  const float d = h2f(x.d) * y.d;
  return d * static_cast<float>(bsum);
}

// Q2_K/Q4_K/IQ2_XXS: block values in parallel (block b on lane b mod 32), summed in block order.
template <uint32_t T>
__device__ float dot_k(const uint8_t* w, const uint8_t* act, int64_t n, int lane) {
  const auto* yb = reinterpret_cast<const BQ8_K*>(act);
  const int64_t nb = n / 256;
  float sum = 0.0f;
  for (int64_t base = 0; base < nb; base += 32) {
    const int64_t b = base + lane;
    float v = 0.0f;
    if (b < nb) {
      if constexpr (T == kQ2_K) v = block_q2_k(reinterpret_cast<const BQ2_K*>(w)[b], yb[b]);
      else if constexpr (T == kQ4_K) v = block_q4_k(reinterpret_cast<const BQ4_K*>(w)[b], yb[b]);
      else v = block_iq2(reinterpret_cast<const BIq2*>(w)[b], yb[b]);
    }
    const int cnt = static_cast<int>(nb - base < 32 ? nb - base : 32);
    for (int j = 0; j < cnt; ++j) sum = sum + __shfl_sync(kFull, v, j);
  }
  if constexpr (T == kIQ2_XXS) return 0.125f * sum;
  return sum;
}

struct MatvecArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t cols, n_rows, row0, group_rows;
  const int32_t* ids;
  const uint8_t* act;
  size_t act_stride;  // bytes between groups' activations (0: shared)
  float* y;
  int64_t y_stride;
};

// One warp per output row; blockIdx.y is the group.
template <uint32_t T>
__global__ void matvec_kernel(MatvecArgs a) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  const int g = blockIdx.y;
  if (r >= a.n_rows) return;  // uniform across the warp
  const int64_t base = a.row0 + static_cast<int64_t>(a.ids ? a.ids[g] : g) * a.group_rows;
  const uint8_t* w = a.w + static_cast<size_t>(base + r) * a.row_bytes;
  const uint8_t* x = a.act + g * a.act_stride;
  float v;
  if constexpr (T == kF32 || T == kF16 || T == kBF16)
    v = dot_float<T>(w, reinterpret_cast<const float*>(x), a.cols, lane);
  else if constexpr (T == kQ8_0 || T == kMXFP4)
    v = dot_q8_lanes<T>(w, x, a.cols, lane);
  else
    v = dot_k<T>(w, x, a.cols, lane);
  if (lane == 0) a.y[g * a.y_stride + r] = v;
}

template <uint32_t T>
void launch_matvec(const MatvecArgs& a, int groups) {
  constexpr int kThreads = 256;
  const int64_t warps_per_block = kThreads / 32;
  const dim3 grid(static_cast<unsigned>((a.n_rows + warps_per_block - 1) / warps_per_block),
                  static_cast<unsigned>(groups));
  matvec_kernel<T><<<grid, kThreads>>>(a);
}

enum class Act { F32, Q8_0, Q8_K, Bad };

Act act_of(uint32_t type) {
  switch (type) {
    case kF32: case kF16: case kBF16: return Act::F32;
    case kQ8_0: case kMXFP4: return Act::Q8_0;
    case kQ2_K: case kQ4_K: case kIQ2_XXS: return Act::Q8_K;
    default: return Act::Bad;
  }
}

}  // namespace

bool upload_quant_tables(const uint64_t* iq2_grid, const uint8_t* iq2_signs,
                         const int8_t* mxfp4_doubled, const float* mxfp4_half_scale) {
  return cudaMemcpyToSymbol(c_iq2_grid, iq2_grid, sizeof(c_iq2_grid)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_iq2_signs, iq2_signs, sizeof(c_iq2_signs)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_mx_doubled, mxfp4_doubled, sizeof(c_mx_doubled)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_mx_half, mxfp4_half_scale, sizeof(c_mx_half)) == cudaSuccess;
}

size_t act_row_bytes(uint32_t type, int64_t cols) {
  switch (act_of(type)) {
    case Act::F32: return static_cast<size_t>(cols) * 4;
    case Act::Q8_0: return static_cast<size_t>(cols / 32) * sizeof(BQ8_0Act);
    case Act::Q8_K: return static_cast<size_t>(cols / 256) * sizeof(BQ8_K);
    default: return 0;
  }
}

void matvec(const DevMatrix& w, int64_t row0, int64_t n_rows, int64_t group_rows,
            const int32_t* ids, int groups, const float* x, int64_t x_stride, float* y,
            int64_t y_stride, uint8_t* act_scratch) {
  if (n_rows <= 0 || groups <= 0) return;
  const Act at = act_of(w.type);
  const int q_rows = x_stride == 0 ? 1 : groups;
  const size_t ab = act_row_bytes(w.type, w.cols);
  MatvecArgs a{w.data, w.row_bytes, w.cols, n_rows, row0, group_rows, ids, nullptr,
               x_stride == 0 ? 0 : ab, y, y_stride};
  if (at == Act::F32) {
    a.act = reinterpret_cast<const uint8_t*>(x);
    a.act_stride = static_cast<size_t>(x_stride) * 4;
  } else {
    const int64_t blocks = (at == Act::Q8_0 ? w.cols / 32 : w.cols / 256) * q_rows;
    const unsigned nblk = static_cast<unsigned>((blocks + 127) / 128);
    if (at == Act::Q8_0)
      quant_q8_0_kernel<<<nblk, 128>>>(x, x_stride, w.cols, q_rows, act_scratch, ab);
    else
      quant_q8_k_kernel<<<nblk, 128>>>(x, x_stride, w.cols, q_rows, act_scratch, ab);
    a.act = act_scratch;
  }
  switch (w.type) {
    case kF32: launch_matvec<kF32>(a, groups); break;
    case kF16: launch_matvec<kF16>(a, groups); break;
    case kBF16: launch_matvec<kBF16>(a, groups); break;
    case kQ8_0: launch_matvec<kQ8_0>(a, groups); break;
    case kMXFP4: launch_matvec<kMXFP4>(a, groups); break;
    case kQ2_K: launch_matvec<kQ2_K>(a, groups); break;
    case kQ4_K: launch_matvec<kQ4_K>(a, groups); break;
    case kIQ2_XXS: launch_matvec<kIQ2_XXS>(a, groups); break;
    default: break;  // rejected by the host side before upload
  }
}

}  // namespace ds4::cuda
