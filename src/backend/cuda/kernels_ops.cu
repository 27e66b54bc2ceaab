// Per-token kernels of the forward pass other than matvec: norms, hyper-connections, RoPE,
// KV quantization round trips, compressor, indexer, sink attention, router, SwiGLU. Each is a
// direct port of the CPU unit named in kernels.h, keeping its operation order so results match
// to the last bit except where f64-evaluated exp/log1p round differently from glibc expf/log1pf.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_stream.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHc = 5;  // hyper-connection streams: the Sinkhorn matrix fits one warp (n*n <= 32)

cudaStream_t stream() { return launch_stream(); }

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// exp and log1p evaluated in f64 and rounded once to f32: the correctly rounded result, which
// glibc's expf (< 0.502 ulp) also gives in all but rare halfway cases; CUDA's expf (2 ulp) would
// flip activation quantization codes and discrete top-k choices far more often.
__device__ float exp_f(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ float log1p_f(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

// model::rms_norm family; one block per row. The f64 sum of squares is a block-wide tree here
// (the CPU's detail::sum_squares_f64 uses 4 sequential f64 lanes): the two differ by f64
// rounding only (relative ~1e-16), far below the f32 rounding of mean + eps that follows, so the
// f32 scale almost always agrees bit for bit (docs/parity.md).
// 1/sqrt(mean(x^2) + eps) of x[0, dim), computed by the whole block (blockDim.x == kThreads).
// 1/sqrt(mean + eps) from this thread's share `acc` of the f64 sum of squares of `dim` values
// (any block size that is a multiple of 32, up to 1024).
__device__ float block_rms_from_partial(double acc, int64_t dim, float eps) {
  __shared__ double part[32];
  __shared__ float scale;
  for (int off = 16; off >= 1; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) s += part[k];
    scale = 1.0f / sqrtf(static_cast<float>(s / static_cast<double>(dim)) + eps);
  }
  __syncthreads();
  return scale;
}

__device__ float block_rms_scale(const float* xr, int64_t dim, float eps) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) acc += static_cast<double>(xr[i]) * xr[i];
  return block_rms_from_partial(acc, dim, eps);
}

// out = x * s [* w] for one row by the whole block. Rows of at most kNormRegs * blockDim.x values
// are held in registers: every load is issued before the first use (a strided loop would wait one
// memory round trip per iteration, in-order issue), and out may alias x. Longer rows loop.
constexpr int kNormRegs = 16;
__device__ void block_rms_norm_row(const float* xr, const float* w, float* orow, int64_t dim, float eps) {
  if (dim > kNormRegs * static_cast<int64_t>(blockDim.x)) {
    const float s = block_rms_scale(xr, dim, eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = w ? xr[i] * s * w[i] : xr[i] * s;
    return;
  }
  float v[kNormRegs], wv[kNormRegs];
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    v[k] = i < dim ? xr[i] : 0.0f;
    wv[k] = w && i < dim ? w[i] : 1.0f;
  }
  double acc = 0;
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) acc += static_cast<double>(v[k]) * v[k];
  const float s = block_rms_from_partial(acc, dim, eps);
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    if (i < dim) orow[i] = w ? v[k] * s * wv[k] : v[k] * s;
  }
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int64_t dim, float eps) {
  block_rms_norm_row(x + blockIdx.x * dim, w, out + blockIdx.x * dim, dim, eps);
}

// Embedding row lookup (quant::dequantize_row of token_embd row tok[0]) replicated into n_hc
// streams (model::hc_from_embedding). Types: F32, F16, BF16, Q8_0.
__global__ void embed_kernel(const uint8_t* table, uint32_t type, size_t row_bytes, const int32_t* tokens,
                             const int64_t* pos, int n_hc, int64_t d, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  const uint8_t* row = table + static_cast<size_t>(tokens[*pos]) * row_bytes;
  float v;
  if (type == 0) {
    v = reinterpret_cast<const float*>(row)[i];
  } else if (type == 1) {
    v = __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(row)[i]));
  } else if (type == 30) {
    v = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
  } else {  // Q8_0: d * q
    const uint8_t* b = row + (i / 32) * 34;
    const float dd = __half2float(__ushort_as_half(static_cast<uint16_t>(b[0] | (b[1] << 8))));
    v = dd * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  }
  for (int r = 0; r < n_hc; ++r) x[r * d + i] = v;
}

// The HC split's post weights and Sinkhorn combine matrix (model::hc_split_sinkhorn), one warp:
// the n x n matrix lives in registers (lane r*n + c holds entry (r, c); n <= kMaxHc), every row
// or column sum gathers its n entries by shuffles and adds them in the CPU's order.
__global__ void hc_sinkhorn_kernel(const float* mix, const float* scale, const float* base, int n, int iters,
                                   float eps, float* post, float* comb) {
  constexpr unsigned kAll = 0xffffffffu;
  const int t = threadIdx.x;
  if (t < n) {
    const float z2 = mix[n + t] * scale[1] + base[n + t];
    post[t] = 2.0f / (1.0f + exp_f(-z2));
  }
  const bool on = t < n * n;
  const int r = on ? t / n : 0, c = on ? t % n : 0;
  float m = on ? mix[2 * n + t] * scale[2] + base[2 * n + t] : 0.0f;
  // Row softmax: max and sum over the row's entries in column order.
  float row_max = -1.0e30f;
  for (int k = 0; k < n; ++k) {
    const float v = __shfl_sync(kAll, m, r * n + k);
    if (v > row_max) row_max = v;
  }
  m = exp_f(m - row_max);
  float sum = 0.0f;
  for (int k = 0; k < n; ++k) sum += __shfl_sync(kAll, m, r * n + k);
  m = m * (1.0f / sum) + eps;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      float rs = 0.0f;
      for (int k = 0; k < n; ++k) rs += __shfl_sync(kAll, m, r * n + k);
      m *= 1.0f / (rs + eps);
    }
    float cs = 0.0f;
    for (int k = 0; k < n; ++k) cs += __shfl_sync(kAll, m, c + n * k);
    m *= 1.0f / (cs + eps);
  }
  if (on) comb[t] = m;
}

// The HC split's pre weights (threads t < n), then sub_in = sum_r pre[r] * x[r] and, with
// norm_w, h = rms_norm(sub_in) * norm_w (the sublayer's attn_norm / ffn_norm, model::rms_norm):
// everything the sublayer's first matvec waits for, without the Sinkhorn iterations.
__global__ void __launch_bounds__(1024) hc_pre_kernel(const float* mix, const float* scale, const float* base,
                                                      int n, float eps, const float* x, int64_t d, float* pre,
                                                      float* sub_in, const float* norm_w, float norm_eps, float* h) {
  __shared__ float s_pre[kMaxHc];
  const int t = threadIdx.x;
  if (t < n) {
    const float z = mix[t] * scale[0] + base[t];
    pre[t] = s_pre[t] = 1.0f / (1.0f + exp_f(-z)) + eps;
  }
  __syncthreads();
  // sub_in and its norm. Up to kSumRegs values per thread stay in registers, their x and weight
  // loads all issued first (in-order issue would otherwise wait a round trip per load).
  constexpr int kSumRegs = 4;
  double acc = 0;
  if (d > kSumRegs * static_cast<int64_t>(blockDim.x)) {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float o = 0.0f;
      for (int r = 0; r < n; ++r) o += x[r * d + i] * s_pre[r];
      sub_in[i] = o;
      acc += static_cast<double>(o) * o;
    }
    if (!norm_w) return;  // uniform: the whole block returns
    const float sc = block_rms_from_partial(acc, d, norm_eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) h[i] = sub_in[i] * sc * norm_w[i];
    return;
  }
  float xv[kSumRegs][kMaxHc], o[kSumRegs], wv[kSumRegs];
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
#pragma unroll
    for (int r = 0; r < kMaxHc; ++r) xv[k][r] = i < d && r < n ? x[r * d + i] : 0.0f;
    wv[k] = norm_w && i < d ? norm_w[i] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    o[k] = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxHc; ++r)
      if (r < n) o[k] += xv[k][r] * s_pre[r];
    if (i < d) {
      sub_in[i] = o[k];
      acc += static_cast<double>(o[k]) * o[k];
    }
  }
  if (!norm_w) return;  // uniform: the whole block returns
  const float sc = block_rms_from_partial(acc, d, norm_eps);
#pragma unroll
  for (int k = 0; k < kSumRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    if (i < d) h[i] = o[k] * sc * wv[k];
  }
}

// HC projection with its input norm (rms_norm_unweighted then a float-matrix vec_dot), one block
// per output row: the block stages x and the row in shared memory (cp.async), takes the f64 sum
// of squares, forms every product w[i] * (x[i] * s), then lanes 0..15 of warp 0 add them in
// quant::ref's 16 lane chains (element i into lane i mod 16) and its tree. 24-row HC matrices thereby cost one
// launch and ~2 shared-memory passes instead of a norm launch and a 3-block matvec.
template <uint32_t kType>  // ggml type: F32 (0), F16 (1), BF16 (30)
__device__ float load_float_w(const uint8_t* w, int64_t i) {
  if constexpr (kType == 0) return reinterpret_cast<const float*>(w)[i];
  else if constexpr (kType == 1) return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(w)[i]));
  else return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[i]) << 16);  // BF16
}

template <uint32_t kType>
__global__ void hc_norm_matvec_kernel(const uint8_t* w, size_t row_bytes, int64_t cols, const float* x,
                                      float eps, float* y) {
  extern __shared__ __align__(16) uint8_t hc_smem[];
  float* v = reinterpret_cast<float*>(hc_smem);  // x, then the products w[i] * (x[i] * s)
  uint8_t* wrow = hc_smem + cols * 4;
  const uint8_t* src = w + blockIdx.x * row_bytes;
  for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) cp_async16(v + 4 * i, x + 4 * i);
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(row_bytes / 16); i += blockDim.x)
    cp_async16(wrow + 16 * i, src + 16 * i);
  cp_async_wait();
  __syncthreads();
  double acc = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc += static_cast<double>(v[i]) * v[i];
  const float sc = block_rms_from_partial(acc, cols, eps);  // synchronises the block
  // The products do not depend on the summation order, so every thread forms its share; only
  // the 16 lane chains below are sequential.
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) v[i] = load_float_w<kType>(wrow, i) * (v[i] * sc);
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  float a = 0.0f;
  if (lane < 16) {
    int64_t i = lane;
    for (; i + 16 * 7 < cols; i += 16 * 8) {
      float p[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) p[u] = v[i + 16 * u];
#pragma unroll
      for (int u = 0; u < 8; ++u) a = a + p[u];
    }
    for (; i < cols; i += 16) a = a + v[i];
  }
  for (int off = 8; off >= 1; off >>= 1) a = a + __shfl_down_sync(0xffffffffu, a, off);
  if (lane == 0) y[blockIdx.x] = a;
}

__global__ void hc_post_kernel(const float* y, const float* x, const float* post,
                               const float* comb, int n, int64_t d, float* out) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * d) return;
  const int c = static_cast<int>(k / d);
  const int64_t i = k % d;
  float o = y[i] * post[c];
  for (int r = 0; r < n; ++r) o += comb[c + n * r] * x[r * d + i];
  out[k] = o;
}

__global__ void hc_output_kernel(const float* logits, const float* scale, const float* base,
                                 int n, float eps, const float* x, int64_t d, float* z) {
  __shared__ float w[16];
  if (threadIdx.x == 0)
    for (int i = 0; i < n; ++i) {
      const float v = logits[i] * scale[0] + base[i];
      float s;
      if (v >= 0.0f) {
        s = 1.0f / (1.0f + exp_f(-v));
      } else {
        const float e = exp_f(v);
        s = e / (1.0f + e);
      }
      w[i] = s + eps;
    }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float o = 0.0f;
    for (int r = 0; r < n; ++r) o += x[r * d + i] * w[r];
    z[i] = o;
  }
}

// Rotation of pair p of a tail by the angles of `cs` ([cos n_pair][sin n_pair]).
__device__ void rope_pair(float* t, const float* cs, int n_pair, int p, float sign) {
  const float c = cs[p];
  const float s = sign * cs[n_pair + p];
  const float x0 = t[2 * p], x1 = t[2 * p + 1];
  t[2 * p] = x0 * c - x1 * s;
  t[2 * p + 1] = x0 * s + x1 * c;
}

__global__ void rope_kernel(float* x, int n_heads, int64_t head_dim, const float* table, int n_pair,
                            const int64_t* pos, float sign) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<int64_t>(n_heads) * n_pair) return;
  const int64_t h = k / n_pair;
  rope_pair(x + h * head_dim + head_dim - 2 * n_pair, table + *pos * 2 * n_pair, n_pair,
            static_cast<int>(k % n_pair), sign);
}

// model::kv_quant round_trip_block: power-of-two scale from ceil(log2(amax/qmax)), taken exactly
// from the float's binary exponent.
__device__ int ceil_log2(float v) {
  int e;
  const float m = frexpf(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? e - 1 : e;
}

__device__ float e4m3_round_abs(float ax) {
  constexpr int32_t kMinStepBits = (127 - 9) << 23;
  const int32_t e = static_cast<int32_t>(__float_as_uint(ax) & 0x7f800000u) - (3 << 23);
  const int32_t step_bits = e > kMinStepBits ? e : kMinStepBits;
  const float step = __int_as_float(step_bits);
  const float inv_step = __int_as_float((254 << 23) - step_bits);
  return ((ax * inv_step + 8388608.0f) - 8388608.0f) * step;
}

__device__ float e2m1_round_abs(float ax) {
  return 0.5f * static_cast<float>(ax > 0.25f) + 0.5f * static_cast<float>(ax >= 0.75f) +
         0.5f * static_cast<float>(ax > 1.25f) + 0.5f * static_cast<float>(ax >= 1.75f) +
         1.0f * static_cast<float>(ax > 2.5f) + 1.0f * static_cast<float>(ax >= 3.5f) +
         2.0f * static_cast<float>(ax > 5.0f);
}

template <bool kFp8>
__device__ void round_trip_block(float* x, int64_t n) {
  const float floor_v = kFp8 ? 1.0e-4f : 7.052966104933725e-38f;
  const float qmax = kFp8 ? 448.0f : 6.0f;
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float av = fabsf(x[i]);
    amax = av > amax ? av : amax;
  }
  if (amax < floor_v) amax = floor_v;
  const int e = ceil_log2(amax / qmax);
  const float scale = ldexpf(1.0f, e);
  const float inv_scale = ldexpf(1.0f, -e);
  const int32_t qmax_bits = __float_as_int(qmax);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * inv_scale;
    const int32_t q_bits = __float_as_int(kFp8 ? e4m3_round_abs(fabsf(v)) : e2m1_round_abs(fabsf(v)));
    const uint32_t q = static_cast<uint32_t>(q_bits < qmax_bits ? q_bits : qmax_bits);
    const uint32_t sign = v < 0.0f ? 0x80000000u : 0u;
    x[i] = __uint_as_float(q | sign) * scale;
  }
}


// One block per row: RMSNorm (weight optional), then the tail RoPE at *pos, and with `raw` the
// KV row store (FP8 round trip of [0, n_fp8) in blocks of 64, f16 rounding, ring row *pos %
// raw_cap). Stages are separated by barriers and run the CPU units' operations.
__global__ void norm_rope_kernel(float* x, const float* w, int64_t dim, float eps, const float* table,
                                 int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap) {
  float* row = x + blockIdx.x * dim;
  block_rms_norm_row(row, w, row, dim, eps);
  __syncthreads();
  for (int p = threadIdx.x; p < n_pair; p += blockDim.x)
    rope_pair(row + dim - 2 * n_pair, table + *pos * 2 * n_pair, n_pair, p, 1.0f);
  if (!raw) return;
  __syncthreads();
  for (int64_t b = threadIdx.x; b < (n_fp8 + 63) / 64; b += blockDim.x)
    round_trip_block<true>(row + b * 64, n_fp8 - b * 64 < 64 ? n_fp8 - b * 64 : 64);
  __syncthreads();
  float* dst = raw + (*pos % raw_cap) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __half2float(__float2half_rn(row[i]));
    row[i] = v;
    dst[i] = v;
  }
}

// Hadamard butterfly (model::hadamard), scale, then FP4 blocks of 32, on one row (one thread).
__device__ void qat_row(float* v, int64_t dim) {
  for (int64_t stride = 1; stride < dim; stride <<= 1)
    for (int64_t base = 0; base < dim; base += 2 * stride)
      for (int64_t i = 0; i < stride; ++i) {
        const float a = v[base + i];
        const float b = v[base + stride + i];
        v[base + i] = a + b;
        v[base + stride + i] = a - b;
      }
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
  for (int64_t i = 0; i < dim; ++i) v[i] *= scale;
  for (int64_t off = 0; off < dim; off += 32) round_trip_block<false>(v + off, 32);
}

// qat_row by the whole block on `v` in shared memory: each butterfly stage's pairs are
// disjoint, so running a stage's pairs in parallel gives the serial result exactly; the scale is
// elementwise and each FP4 block of 32 is one thread's sequential round trip.
__device__ void block_qat_row(float* v, int64_t dim) {
  for (int64_t stride = 1; stride < dim; stride <<= 1) {
    for (int64_t p = threadIdx.x; p < dim / 2; p += blockDim.x) {
      const int64_t base = p / stride * 2 * stride, i = p % stride;
      const float a = v[base + i];
      const float b = v[base + stride + i];
      v[base + i] = a + b;
      v[base + stride + i] = a - b;
    }
    __syncthreads();
  }
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) v[i] *= scale;
  __syncthreads();
  for (int64_t off = 32 * threadIdx.x; off < dim; off += 32 * blockDim.x) round_trip_block<false>(v + off, 32);
  __syncthreads();
}

// One block per row, the row staged in shared memory (dim floats).
__global__ void indexer_qat_kernel(float* x, int64_t dim) {
  extern __shared__ float qat_smem[];
  float* row = x + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) qat_smem[i] = row[i];
  __syncthreads();
  block_qat_row(qat_smem, dim);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = qat_smem[i];
}

__global__ void compressor_store_kernel(const float* kv, const float* score, const float* ape,
                                        int64_t width, uint32_t ratio, const int64_t* pos,
                                        float* state_kv, float* state_score) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= width) return;
  const int64_t p = *pos;
  const int64_t state_row = ratio == 4 ? 4 + p % 4 : p % ratio;
  const float* a = ape + (p % ratio) * width;
  state_kv[state_row * width + j] = kv[j];
  state_score[state_row * width + j] = score[j] + a[j];
}

// model::compressor_pool of column j of a full frontier.
__device__ float pool_value(const float* kv, const float* sc, uint32_t ratio, int64_t d, int64_t j) {
  const int64_t width = (ratio == 4 ? 2 : 1) * d;
  constexpr float kEmpty = -1.0e30f;
  constexpr float kAllEmpty = kEmpty * 0.5f;
  float max_score = kEmpty, denom = 0.0f, sum = 0.0f;
  if (ratio == 4) {
    for (int r = 0; r < 4; ++r) {
      max_score = fmaxf(max_score, sc[r * width + j]);
      max_score = fmaxf(max_score, sc[(4 + r) * width + d + j]);
    }
    if (max_score <= kAllEmpty) return 0.0f;
    for (int r = 0; r < 4; ++r) {
      const int64_t ip = r * width + j;
      const int64_t ic = (4 + r) * width + d + j;
      const float wp = exp_f(sc[ip] - max_score);
      const float wc = exp_f(sc[ic] - max_score);
      denom += wp + wc;
      sum += wp * kv[ip];
      sum += wc * kv[ic];
    }
  } else {
    for (uint32_t r = 0; r < ratio; ++r) max_score = fmaxf(max_score, sc[r * width + j]);
    if (max_score <= kAllEmpty) return 0.0f;
    for (uint32_t r = 0; r < ratio; ++r) {
      const float w = exp_f(sc[r * width + j] - max_score);
      denom += w;
      sum += w * kv[r * width + j];
    }
  }
  return denom > 0.0f ? sum / denom : 0.0f;
}

constexpr int kMaxQatDim = 1024;  // indexer rows up to this size are quantized in shared memory

// Compressor emission (model::Compressor::push after the store, spec §3.4.5/§3.4.7), one block,
// a no-op unless (pos + 1) % ratio == 0: pool the frontier into `row`, RMS-norm it with `norm`,
// rotate its tail at the row's first position (pos + 1 - ratio), quantize (FP8 on the first
// n_fp8 values, or the indexer's Hadamard + FP4), round to f16 into row (pos + 1) / ratio - 1 of
// `rows`, and for ratio 4 shift the current lane of the frontier into the previous one.
__global__ void compressor_emit_kernel(float* kv, float* sc, uint32_t ratio, int64_t d,
                                       const float* norm, float eps, const float* rope_table,
                                       int n_pair, bool indexer, int64_t n_fp8, const int64_t* pos,
                                       float* row, float* rows) {
  const int64_t p = *pos;
  if ((p + 1) % ratio != 0) return;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = pool_value(kv, sc, ratio, d, j);
  __syncthreads();
  const float s = block_rms_scale(row, d, eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = row[j] * s * norm[j];
  __syncthreads();
  const float* cs = rope_table + (p + 1 - ratio) * 2 * n_pair;
  for (int k = threadIdx.x; k < n_pair; k += blockDim.x) rope_pair(row + d - 2 * n_pair, cs, n_pair, k, 1.0f);
  __syncthreads();
  if (indexer) {
    __shared__ float qbuf[kMaxQatDim];
    if (d <= kMaxQatDim) {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) qbuf[j] = row[j];
      __syncthreads();
      block_qat_row(qbuf, d);
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] = qbuf[j];
    } else if (threadIdx.x == 0) {
      qat_row(row, d);
    }
  } else {
    for (int64_t b = threadIdx.x; b < (n_fp8 + 63) / 64; b += blockDim.x)
      round_trip_block<true>(row + b * 64, n_fp8 - b * 64 < 64 ? n_fp8 - b * 64 : 64);
  }
  __syncthreads();
  float* out = rows + ((p + 1) / ratio - 1) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = __half2float(__float2half_rn(row[j]));
  if (ratio == 4) {
    const int64_t width = 2 * d;
    for (int64_t i = threadIdx.x; i < 4 * width; i += blockDim.x) {
      kv[i] = kv[4 * width + i];
      sc[i] = sc[4 * width + i];
    }
  }
}

// model::detail::dot_f32 (8 interleaved partial sums, fixed tree, serial tail) with b read at
// stride `bs` (b[i * bs]).
__device__ float dot8_strided(const float* a, const float* b, int bs, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
#pragma unroll
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[(i + l) * bs];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i * bs];
  return s;
}

// One warp per compressed row (grid-stride); lane h (mod 32) takes heads h, h+32, ...; the head
// terms are summed in head order as model::indexer_scores does. The queries sit transposed in
// shared memory ([dim][n_head]), so the lanes' reads of one query element are consecutive words
// and the row's elements are one broadcast read per warp.
__global__ void indexer_scores_kernel(const float* q, const float* w, int n_head, int64_t dim,
                                      const float* rows, const int64_t* pos, uint32_t ratio,
                                      float* scores) {
  extern __shared__ float qt[];
  for (int64_t k = threadIdx.x; k < n_head * dim; k += blockDim.x) qt[(k % dim) * n_head + k / dim] = q[k];
  __syncthreads();
  const int64_t n_rows = (*pos + 1) / ratio;
  const int lane = threadIdx.x & 31;
  const int64_t warps = blockDim.x / 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim * n_head));
  for (int64_t c = blockIdx.x * warps + threadIdx.x / 32; c < n_rows; c += gridDim.x * warps) {
    const float* row = rows + c * dim;
    float s = 0.0f;
    for (int h0 = 0; h0 < n_head; h0 += 32) {
      const int h = h0 + lane;
      float t = 0.0f;
      if (h < n_head) t = fmaxf(dot8_strided(row, qt + h, n_head, dim), 0.0f) * (w[h] * scale);
      const int cnt = n_head - h0 < 32 ? n_head - h0 : 32;
      for (int k = 0; k < cnt; ++k) s += __shfl_sync(0xffffffffu, t, k);
    }
    if (lane == 0) scores[c] = s;
  }
}

// Top-k by radix select (model::indexer_select_top_k's order: higher score first, NaN last,
// lower id on ties; output in ascending id order), one block of kTopKThreads threads.
// Each score maps to a 32-bit key that orders like the scores (NaN lowest, -0 == +0); four
// 8-bit histogram passes find the k-th largest key T; the rows with key > T and the first
// (by id) rows with key == T that complete k are then written in id order: each thread owns a
// contiguous id range, and exclusive scans of the per-thread counts give its output slots.
constexpr int kTopKThreads = 1024;

__device__ uint32_t score_key(float v) {
  if (isnan(v)) return 0u;
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // -inf -> 0x007fffff > 0
}

// Exclusive prefix sum of v over the block (blockDim.x == kTopKThreads); *total gets the sum.
__device__ int64_t block_exclusive_scan(int64_t v, int64_t* total) {
  __shared__ int64_t warp_sum[kTopKThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  int64_t inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    const int64_t o = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += o;
  }
  if (lane == 31) warp_sum[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int64_t w = warp_sum[lane];
    for (int off = 1; off < 32; off <<= 1) {
      const int64_t o = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += o;
    }
    warp_sum[lane] = w;  // inclusive
  }
  __syncthreads();
  const int64_t before = (warp ? warp_sum[warp - 1] : 0) + inc - v;
  *total = warp_sum[kTopKThreads / 32 - 1];
  __syncthreads();
  return before;
}

__global__ void top_k_kernel(const float* s, const int64_t* pos, uint32_t ratio, int64_t k, uint32_t* sel) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_remaining;
  const int64_t n = (*pos + 1) / ratio;
  const int t = threadIdx.x;
  if (n <= k) {
    for (int64_t a = t; a < n; a += blockDim.x) sel[a] = static_cast<uint32_t>(a);
    return;
  }
  uint32_t prefix = 0, mask = 0;
  if (t == 0) s_remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = t; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t a = t; a < n; a += blockDim.x) {
      const uint32_t key = score_key(s[a]);
      const bool in = (key & mask) == prefix;
      const uint32_t digit = in ? (key >> shift) & 255u : 256u + (threadIdx.x & 31);
      // Lanes with the same digit add once (the top digits of nearby scores often coincide).
      const uint32_t peers = __match_any_sync(__activemask(), digit);
      if (in && (__ffs(peers) - 1) == (threadIdx.x & 31)) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    if (t == 0) {
      int64_t rem = s_remaining;
      int d = 255;
      for (; d > 0 && hist[d] < rem; --d) rem -= hist[d];
      s_remaining = rem;
      s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
    }
    __syncthreads();
    prefix = s_prefix;
    mask |= 255u << shift;
  }
  const uint32_t T = prefix;        // the k-th largest key
  const int64_t take_eq = s_remaining;  // rows with key == T to take, lowest ids first
  const int64_t per = (n + blockDim.x - 1) / blockDim.x;
  const int64_t lo = t * per < n ? t * per : n, hi = lo + per < n ? lo + per : n;
  int64_t gt = 0, eq = 0;
  for (int64_t a = lo; a < hi; ++a) {
    const uint32_t key = score_key(s[a]);
    gt += key > T;
    eq += key == T;
  }
  int64_t total;
  int64_t gt_before = block_exclusive_scan(gt, &total);
  int64_t eq_before = block_exclusive_scan(eq, &total);
  for (int64_t a = lo; a < hi; ++a) {
    const uint32_t key = score_key(s[a]);
    if (key > T) {
      sel[gt_before + (eq_before < take_eq ? eq_before : take_eq)] = static_cast<uint32_t>(a);
      ++gt_before;
    } else if (key == T) {
      if (eq_before < take_eq) sel[gt_before + eq_before] = static_cast<uint32_t>(a);
      ++eq_before;
    }
  }
}

// Rows attended at position *pos (model::sink_attention): the raw window [lo, pos] of at most
// n_swa rows, then the layer's compressed rows ((pos + 1) / ratio of them, none for ratio 0) or
// the n_sel rows listed in sel.
struct AttnShape {
  int64_t lo, n_win, n_rows;
};

__device__ AttnShape attn_shape(const int64_t* pos, int64_t n_swa, uint32_t ratio, const uint32_t* sel,
                                int64_t n_sel) {
  const int64_t p = *pos;
  AttnShape a;
  a.n_win = p + 1 < n_swa ? p + 1 : n_swa;
  a.lo = p + 1 - a.n_win;
  a.n_rows = a.n_win + (sel ? n_sel : (ratio ? (p + 1) / ratio : 0));
  return a;
}

__device__ const float* attn_row(const float* raw, int64_t raw_cap, const AttnShape& a,
                                 const float* comp, const uint32_t* sel, int64_t dim, int64_t j) {
  if (j < a.n_win) return raw + ((a.lo + j) % raw_cap) * dim;
  const int64_t c = j - a.n_win;
  return comp + (sel ? static_cast<int64_t>(sel[c]) : c) * dim;
}

// Attention tiles: a scores block covers kAttScoreRows rows x kAttHeads heads (a lane holds
// kAttRowRegs row elements in registers: all its loads in flight at once); a combine block covers
// kAttHeads heads x kAttDims output dims and walks the rows in chunks of kAttChunk (V slices,
// probabilities and selected row ids in shared memory).
constexpr int kAttHeads = 8, kAttScoreRows = 32, kAttRowRegs = 64, kAttDims = 32, kAttChunk = 768;
constexpr int kAttCombineThreads = kAttHeads * 32 + 32;  // 8 output warps + 1 denominator warp

// Attention scores (model::sink_attention step 1) of kAttHeads heads for kAttScoreRows rows:
// 8 lanes per row hold dot8's partial sums; each row element is loaded once and multiplied by
// the 8 heads' q values, stored in shared memory as [dim][8] so one lane reads them as two
// float4. The tree and tail follow dot8, then the scale, as the CPU does. scratch is [head][row]
// with stride n_rows (this position's).
__global__ void attn_scores_kernel(const float* q, int n_head, int64_t dim, const float* raw,
                                   int64_t raw_cap, int64_t n_swa, const int64_t* pos, const float* comp,
                                   uint32_t ratio, const uint32_t* sel, int64_t n_sel, float* scratch) {
  extern __shared__ float4 qs4[];  // [dim][kAttHeads] floats
  float* qs = reinterpret_cast<float*>(qs4);
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  if (blockIdx.x * static_cast<int64_t>(kAttScoreRows) >= a.n_rows) return;  // whole block idle
  const int h0 = blockIdx.y * kAttHeads;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {  // the 8 heads' loads in flight together
    float v[kAttHeads];
#pragma unroll
    for (int hl = 0; hl < kAttHeads; ++hl) v[hl] = h0 + hl < n_head ? q[(h0 + hl) * dim + i] : 0.0f;
    qs4[i * 2] = make_float4(v[0], v[1], v[2], v[3]);
    qs4[i * 2 + 1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncthreads();
  const int64_t j = blockIdx.x * static_cast<int64_t>(kAttScoreRows) + threadIdx.x / 8;
  const int l = threadIdx.x & 7;
  const bool on = j < a.n_rows;
  const float* row = attn_row(raw, raw_cap, a, comp, sel, dim, on ? j : 0);
  const int64_t full = dim / 8 * 8;
  float acc[kAttHeads] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c = 0; c < full; c += 8 * kAttRowRegs) {  // one pass for head_dim <= 512
    float rv[kAttRowRegs];
#pragma unroll
    for (int u = 0; u < kAttRowRegs; ++u) rv[u] = c + 8 * u < full ? row[c + 8 * u + l] : 0.0f;
#pragma unroll
    for (int u = 0; u < kAttRowRegs; ++u) {
      if (c + 8 * u >= full) break;
      const int64_t i = c + 8 * u + l;
      const float r = rv[u];
      const float4 qa = qs4[i * 2], qb = qs4[i * 2 + 1];
      acc[0] += qa.x * r;
      acc[1] += qa.y * r;
      acc[2] += qa.z * r;
      acc[3] += qa.w * r;
      acc[4] += qb.x * r;
      acc[5] += qb.y * r;
      acc[6] += qb.z * r;
      acc[7] += qb.w * r;
    }
  }
#pragma unroll
  for (int hl = 0; hl < kAttHeads; ++hl) {
    float s = acc[hl];
    s = s + __shfl_down_sync(0xffffffffu, s, 4, 8);  // l<4: acc[l] + acc[l+4]
    s = s + __shfl_down_sync(0xffffffffu, s, 1, 8);  // l=0: (0+4)+(1+5); l=2: (2+6)+(3+7)
    s = s + __shfl_down_sync(0xffffffffu, s, 2, 8);  // l=0: the tree
    acc[hl] = s;
  }
  if (!on || l != 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim));
  for (int hl = 0; hl < kAttHeads && h0 + hl < n_head; ++hl) {
    float s = acc[hl];
    for (int64_t i = full; i < dim; ++i) s += qs[i * kAttHeads + hl] * row[i];
    scratch[(h0 + hl) * a.n_rows + j] = s * scale;
  }
}

// Asynchronous global -> shared copies of 16 or 4 bytes; src_bytes = 0 fills zeros (reads nothing).
__device__ void attn_cp_async16(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ void attn_cp_async4(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}

// Dynamic shared memory of attn_combine_kernel: V slices [kAttChunk][kAttDims], probabilities
// [kAttHeads][kAttChunk + 1] (+1: the denominator lanes hit distinct banks), sel ids [kAttChunk].
constexpr size_t kAttCombineSmem =
    (static_cast<size_t>(kAttChunk) * kAttDims + kAttHeads * (kAttChunk + 1) + kAttChunk) * sizeof(float);

// Softmax with a sink and the weighted sum (model::sink_attention steps 2-3) of kAttHeads heads
// x kAttDims output dims, grid (dim slices, head groups); one block per SM. Per chunk of up to
// kAttChunk rows: the V slices of all its rows are copied into shared memory at once (cp.async,
// every load in flight together) while the block makes the probabilities exp(s - max); then warp
// w < 8 (head h0 + w, lane = output dim) sums each output value over the rows in order, every V
// element read once for the 8 heads, and warp 8's lanes sum the 8 denominators in row order.
__global__ void __launch_bounds__(kAttCombineThreads, 1)
attn_combine_kernel(const float* sinks, int n_head, int64_t dim, const float* raw, int64_t raw_cap,
                    int64_t n_swa, const int64_t* pos, const float* comp, uint32_t ratio, const uint32_t* sel,
                    int64_t n_sel, const float* scratch, float* out) {
  extern __shared__ float4 smem4[];
  float* vs = reinterpret_cast<float*>(smem4);
  float* ps = vs + kAttChunk * kAttDims;
  uint32_t* sels = reinterpret_cast<uint32_t*>(ps + kAttHeads * (kAttChunk + 1));
  __shared__ float ms[kAttHeads], inv[kAttHeads];
  const AttnShape a = attn_shape(pos, n_swa, ratio, sel, n_sel);
  const int64_t n_rows = a.n_rows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int h0 = blockIdx.y * kAttHeads;
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(kAttDims);
  const int64_t slot0 = a.lo % raw_cap;
  const bool vec4 = dim % 4 == 0;  // 16-byte copies (rows and the slice start 16-byte aligned)
  float denom = 0.0f, o = 0.0f;
  for (int64_t c0 = 0; c0 < n_rows; c0 += kAttChunk) {
    const int cn = static_cast<int>(n_rows - c0 < kAttChunk ? n_rows - c0 : kAttChunk);
    __syncthreads();  // the previous chunk is consumed
    if (sel) {
      for (int jj = threadIdx.x; jj < cn; jj += blockDim.x)
        if (c0 + jj >= a.n_win) sels[jj] = sel[c0 + jj - a.n_win];
      __syncthreads();
    }
    // Row c0 + jj (attn_row without a 64-bit modulo per row).
    auto row_at = [&](int jj) -> const float* {
      const int64_t r = c0 + jj;
      if (r < a.n_win) {
        int64_t slot = slot0 + r;
        while (slot >= raw_cap) slot -= raw_cap;
        return raw + slot * dim;
      }
      return comp + (sel ? static_cast<int64_t>(sels[jj]) : r - a.n_win) * dim;
    };
    if (vec4) {
      for (int e = threadIdx.x; e < cn * (kAttDims / 4); e += blockDim.x) {
        const int jj = e / (kAttDims / 4), k = 4 * (e % (kAttDims / 4));
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async16(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 16 : 0);
      }
    } else {
      for (int e = threadIdx.x; e < cn * kAttDims; e += blockDim.x) {
        const int jj = e / kAttDims, k = e % kAttDims;
        const float* row = row_at(jj);
        const bool in = i0 + k < dim;
        attn_cp_async4(vs + jj * kAttDims + k, in ? row + i0 + k : row, in ? 4 : 0);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (c0 == 0) {  // per-head max over all rows (with the sink), one warp per head
      if (warp < kAttHeads && h0 + warp < n_head) {
        const float* sc = scratch + (h0 + warp) * n_rows;
        float m = -INFINITY;
#pragma unroll 8
        for (int64_t j = lane; j < n_rows; j += 32) m = fmaxf(m, sc[j]);
        for (int off = 16; off >= 1; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0) ms[warp] = fmaxf(sinks[h0 + warp], m);
      }
      __syncthreads();
      if (warp == kAttHeads && lane < kAttHeads && h0 + lane < n_head) denom = exp_f(sinks[h0 + lane] - ms[lane]);
    }
    constexpr int kBatch = 8;  // score loads in flight per thread before the exps
    for (int e0 = 0; e0 < kAttHeads * cn; e0 += kBatch * static_cast<int>(blockDim.x)) {
      float sv[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + static_cast<int>(threadIdx.x + u * blockDim.x), hl = e / cn, jj = e % cn;
        sv[u] = e < kAttHeads * cn && h0 + hl < n_head ? scratch[(h0 + hl) * n_rows + c0 + jj] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + static_cast<int>(threadIdx.x + u * blockDim.x), hl = e / cn, jj = e % cn;
        if (e < kAttHeads * cn) ps[hl * (kAttChunk + 1) + jj] = h0 + hl < n_head ? exp_f(sv[u] - ms[hl]) : 0.0f;
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    if (warp == kAttHeads) {
      if (lane < kAttHeads && h0 + lane < n_head) {
        const float* p = ps + lane * (kAttChunk + 1);
#pragma unroll 8
        for (int jj = 0; jj < cn; ++jj) denom += p[jj];
      }
    } else {
      const float* p = ps + warp * (kAttChunk + 1);
      const float* v = vs + lane;
#pragma unroll 8
      for (int jj = 0; jj < cn; ++jj) o += p[jj] * v[jj * kAttDims];
    }
  }
  if (warp == kAttHeads && lane < kAttHeads) inv[lane] = 1.0f / denom;
  __syncthreads();
  const int64_t i = i0 + lane;
  if (warp < kAttHeads && h0 + warp < n_head && i < dim) out[(h0 + warp) * dim + i] = o * inv[warp];
}

__device__ float softplus(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return exp_f(z);
  return log1p_f(exp_f(z));
}

// model::router_select_top_k keeps the first k of a stable sort by `beats` (higher score, NaN
// last, earlier expert first on ties), i.e. k rounds of "best remaining expert". Each round is
// one block-wide arg-best (per-thread scan, warp shuffles, then the warps' winners in warp
// order); the probabilities, scores and taken flags live in shared memory (2n floats + n bytes).
__device__ bool router_beats(float a, float b) { return a > b || (isnan(b) && !isnan(a)); }
// Expert (sa, ia) is taken before expert (sb, ib); ib < 0 is "none yet".
__device__ bool router_before(float sa, int ia, float sb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return router_beats(sa, sb) || (!router_beats(sb, sa) && ia < ib);
}

__global__ void router_kernel(const float* logits, int n, const float* bias, const int32_t* tid2eid,
                              const int32_t* tokens, const int64_t* pos, int k, float scale, float* p_out,
                              int32_t* sel, float* weights, int32_t* order) {
  extern __shared__ float router_smem[];
  __shared__ float w_s[32];
  __shared__ int w_i[32];
  float* p = router_smem;
  float* biased = router_smem + n;
  auto* taken = reinterpret_cast<unsigned char*>(router_smem + 2 * n);
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    p[e] = sqrtf(softplus(logits[e]));
    p_out[e] = p[e];
    biased[e] = bias ? p[e] + bias[e] : p[e];
    taken[e] = 0;
  }
  __syncthreads();
  if (tid2eid) {
    if (threadIdx.x == 0) {
      const int64_t token = tokens[*pos];
      for (int i = 0; i < k; ++i) sel[i] = tid2eid[token * k + i];
    }
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int round = 0; round < k; ++round) {
      float bs = 0.0f;
      int bi = -1;
      for (int e = threadIdx.x; e < n; e += blockDim.x)
        if (!taken[e] && router_before(biased[e], e, bs, bi)) {
          bs = biased[e];
          bi = e;
        }
      for (int off = 16; off >= 1; off >>= 1) {
        const float os = __shfl_xor_sync(0xffffffffu, bs, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (router_before(os, oi, bs, bi)) {
          bs = os;
          bi = oi;
        }
      }
      if (lane == 0) {
        w_s[warp] = bs;
        w_i[warp] = bi;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float best_s = w_s[0];
        int best_i = w_i[0];
        for (int w = 1; w < warps; ++w)
          if (router_before(w_s[w], w_i[w], best_s, best_i)) {
            best_s = w_s[w];
            best_i = w_i[w];
          }
        sel[round] = best_i;
        taken[best_i] = 1;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    weights[i] = p[sel[i]];
    sum += weights[i];
  }
  if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
  for (int i = 0; i < k; ++i) weights[i] = weights[i] / sum * scale;
  for (int i = 0; i < k; ++i) order[i] = i;  // stable insertion sort by expert id
  for (int i = 1; i < k; ++i)
    for (int j = i; j > 0 && sel[order[j - 1]] > sel[order[j]]; --j) {
      const int32_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
}

__device__ float silu(float z) {
  float s;
  if (z >= 0.0f) {
    s = 1.0f / (1.0f + exp_f(-z));
  } else {
    const float e = exp_f(z);
    s = e / (1.0f + e);
  }
  return z * s;
}

__global__ void swiglu_kernel(const float* gate, const float* up, int groups, int64_t n,
                              float clamp, const float* w, float* out) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= groups * n) return;
  float g = gate[k], u = up[k];
  if (clamp > 1.0e-6f) {
    if (g > clamp) g = clamp;
    if (u > clamp) u = clamp;
    if (u < -clamp) u = -clamp;
  }
  out[k] = silu(g) * u * (w ? w[k / n] : 1.0f);
}

// moe_combine then hc_post in one pass: thread k = (stream c, index i) forms y[i] (the routed
// rows in `order`, then + shared) itself and applies hc_post's formula to it.
__global__ void moe_combine_hc_post_kernel(const float* down, const int32_t* order, int n_used, int64_t d,
                                           const float* shared, const float* x, const float* post,
                                           const float* comb, int n, float* out) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n * d) return;
  const int c = static_cast<int>(k / d);
  const int64_t i = k % d;
  float m = 0.0f;
  for (int s = 0; s < n_used; ++s) m += down[order[s] * d + i];
  const float y = m + shared[i];
  float o = y * post[c];
  for (int r = 0; r < n; ++r) o += comb[c + n * r] * x[r * d + i];
  out[k] = o;
}

__global__ void localize_experts_kernel(const int32_t* sel, int n_used, int begin, int end, int32_t* local) {
  const int s = threadIdx.x;
  if (s < n_used) local[s] = sel[s] >= begin && sel[s] < end ? sel[s] - begin : -1;
}

__global__ void sum_slots_kernel(const float* slots, int n_slots, int64_t n, float* y) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  float m = slots[j];
  for (int r = 1; r < n_slots; ++r) m += slots[r * n + j];
  y[j] = m;
}

__global__ void sleep_kernel(int64_t us) {
  for (int64_t i = 0; i < us; ++i) __nanosleep(1000);
}

}  // namespace

void device_sleep(int64_t us) { sleep_kernel<<<1, 1, 0, stream()>>>(us); }

void rms_norm(const float* x, const float* weight, float* out, int64_t dim, int n_rows, float eps) {
  rms_norm_kernel<<<n_rows, kThreads, 0, stream()>>>(x, weight, out, dim, eps);
}

void hc_pre_weights(const float* mix, const float* scale, const float* base, int n_hc, float eps,
                    const float* x, int64_t d, float* pre, float* sub_in, const float* norm_w, float norm_eps,
                    float* h) {
  hc_pre_kernel<<<1, 1024, 0, stream()>>>(mix, scale, base, n_hc, eps, x, d, pre, sub_in, norm_w, norm_eps, h);
}

void hc_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc, int iters, float eps,
                 float* post, float* comb) {
  hc_sinkhorn_kernel<<<1, 32, 0, stream()>>>(mix, scale, base, n_hc, iters, eps, post, comb);
}

bool hc_norm_matvec(uint32_t type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                    const float* x, float eps, float* y) {
  const int wb = type == 0 ? 4 : (type == 1 || type == 30) ? 2 : 0;
  const size_t smem = static_cast<size_t>(cols) * 4 + row_bytes;
  if (wb == 0 || cols % 16 != 0 || row_bytes != static_cast<size_t>(cols) * wb || smem > 200 * 1024 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 || rows <= 0)
    return false;
  static bool attr_set = false;  // > 48 KiB of dynamic shared memory needs an opt-in (once)
  if (!attr_set) {
    for (const void* f : {reinterpret_cast<const void*>(hc_norm_matvec_kernel<0>),
                          reinterpret_cast<const void*>(hc_norm_matvec_kernel<1>),
                          reinterpret_cast<const void*>(hc_norm_matvec_kernel<30>)})
      cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    attr_set = true;
  }
  const unsigned grid = static_cast<unsigned>(rows);
  if (type == 0) hc_norm_matvec_kernel<0><<<grid, 1024, smem, stream()>>>(w, row_bytes, cols, x, eps, y);
  else if (type == 1) hc_norm_matvec_kernel<1><<<grid, 1024, smem, stream()>>>(w, row_bytes, cols, x, eps, y);
  else hc_norm_matvec_kernel<30><<<grid, 1024, smem, stream()>>>(w, row_bytes, cols, x, eps, y);
  return true;
}

void hc_post(const float* y, const float* x, const float* post, const float* comb, int n_hc,
             int64_t d, float* out) {
  hc_post_kernel<<<blocks_for(n_hc * d), kThreads, 0, stream()>>>(y, x, post, comb, n_hc, d, out);
}

void hc_output(const float* logits, const float* scale, const float* base, int n_hc, float eps,
               const float* x, int64_t d, float* z) {
  hc_output_kernel<<<1, kThreads, 0, stream()>>>(logits, scale, base, n_hc, eps, x, d, z);
}

void rope_tail(float* x, int n_heads, int64_t head_dim, const float* table, int n_pair,
               const int64_t* pos, bool inverse) {
  rope_kernel<<<blocks_for(static_cast<int64_t>(n_heads) * n_pair), kThreads, 0, stream()>>>(
      x, n_heads, head_dim, table, n_pair, pos, inverse ? -1.0f : 1.0f);
}

void compressor_store(const float* kv, const float* score, const float* ape, int64_t width,
                      uint32_t ratio, const int64_t* pos, float* state_kv, float* state_score) {
  compressor_store_kernel<<<blocks_for(width), kThreads, 0, stream()>>>(kv, score, ape, width, ratio, pos,
                                                                        state_kv, state_score);
}

void compressor_emit(float* state_kv, float* state_score, uint32_t ratio, int64_t d, const float* norm,
                     float eps, const float* rope_table, int n_pair, bool indexer, int64_t n_fp8,
                     const int64_t* pos, float* row, float* rows) {
  compressor_emit_kernel<<<1, kThreads, 0, stream()>>>(state_kv, state_score, ratio, d, norm, eps,
                                                       rope_table, n_pair, indexer, n_fp8, pos, row, rows);
}

void indexer_qat(float* x, int n_rows, int64_t dim) {
  if (n_rows <= 0) return;
  indexer_qat_kernel<<<n_rows, 128, dim * sizeof(float), stream()>>>(x, dim);
}

void indexer_scores(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                    const int64_t* pos, uint32_t ratio, int64_t max_rows, float* scores) {
  const size_t smem = static_cast<size_t>(n_head) * dim * sizeof(float);
  static bool attr_set = false;  // > 48 KiB of dynamic shared memory needs an opt-in (once)
  if (!attr_set) {
    cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    attr_set = true;
  }
  const int64_t blocks = (max_rows + 7) / 8;  // 8 warps (rows) per block at most
  indexer_scores_kernel<<<static_cast<unsigned>(blocks < 264 ? blocks : 264), kThreads, smem, stream()>>>(
      q, w, n_head, dim, rows, pos, ratio, scores);
}

void indexer_top_k(const float* scores, const int64_t* pos, uint32_t ratio, int64_t max_rows, int64_t k,
                   uint32_t* sel) {
  (void)max_rows;
  top_k_kernel<<<1, kTopKThreads, 0, stream()>>>(scores, pos, ratio, k, sel);
}

void sink_attention(const float* q, const float* sinks, int n_head, int64_t dim, const float* raw,
                    int64_t raw_cap, int64_t n_swa, const int64_t* pos, const float* comp,
                    uint32_t ratio, const uint32_t* sel, int64_t n_sel, int64_t max_rows,
                    float* scratch, float* out) {
  const unsigned groups = static_cast<unsigned>((n_head + kAttHeads - 1) / kAttHeads);
  const size_t smem = static_cast<size_t>(dim) * kAttHeads * sizeof(float);
  // More than 48 KiB of dynamic shared memory needs an opt-in, per device.
  if (smem > 48 * 1024)  // head_dim > 1536 only
    cudaFuncSetAttribute(attn_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((max_rows + kAttScoreRows - 1) / kAttScoreRows), groups);
  attn_scores_kernel<<<grid, kAttScoreRows * 8, smem, stream()>>>(q, n_head, dim, raw, raw_cap, n_swa, pos,
                                                                  comp, ratio, sel, n_sel, scratch);
  static uint64_t combine_set = 0;  // devices whose opt-in is done
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 64 || !(combine_set >> dev & 1u)) {
    cudaFuncSetAttribute(attn_combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(kAttCombineSmem));
    if (dev < 64) combine_set |= uint64_t{1} << dev;
  }
  const dim3 cgrid(static_cast<unsigned>((dim + kAttDims - 1) / kAttDims), groups);
  attn_combine_kernel<<<cgrid, kAttCombineThreads, kAttCombineSmem, stream()>>>(sinks, n_head, dim, raw, raw_cap, n_swa, pos,
                                                                  comp, ratio, sel, n_sel, scratch, out);
}

void embed(const uint8_t* table, uint32_t type, size_t row_bytes, const int32_t* tokens,
           const int64_t* pos, int n_hc, int64_t d, float* x) {
  embed_kernel<<<blocks_for(d), kThreads, 0, stream()>>>(table, type, row_bytes, tokens, pos, n_hc, d, x);
}

void router(const float* logits, int n_expert, const float* bias, const int32_t* tid2eid,
            const int32_t* tokens, const int64_t* pos, int n_used, float scale, float* probs,
            int32_t* sel, float* weights, int32_t* order) {
  router_kernel<<<1, kThreads, 2 * n_expert * sizeof(float) + n_expert, stream()>>>(
      logits, n_expert, bias, tid2eid, tokens, pos, n_used, scale, probs, sel, weights, order);
}

void swiglu(const float* gate, const float* up, int groups, int64_t n, float clamp, const float* w,
            float* out) {
  swiglu_kernel<<<blocks_for(groups * n), kThreads, 0, stream()>>>(gate, up, groups, n, clamp, w, out);
}

void norm_rope(float* x, const float* weight, int64_t dim, int n_rows, float eps, const float* table,
               int n_pair, const int64_t* pos, int64_t n_fp8, float* raw, int64_t raw_cap) {
  norm_rope_kernel<<<n_rows, kThreads, 0, stream()>>>(x, weight, dim, eps, table, n_pair, pos, n_fp8, raw, raw_cap);
}

void moe_combine_hc_post(const float* down, const int32_t* order, int n_used, int64_t d, const float* shared,
                         const float* x, const float* post, const float* comb, int n_hc, float* out) {
  moe_combine_hc_post_kernel<<<blocks_for(n_hc * d), kThreads, 0, stream()>>>(down, order, n_used, d, shared, x,
                                                                             post, comb, n_hc, out);
}

void localize_experts(const int32_t* sel, int n_used, int begin, int end, int32_t* local) {
  localize_experts_kernel<<<1, 32, 0, stream()>>>(sel, n_used, begin, end, local);
}

void sum_slots(const float* slots, int n_slots, int64_t n, float* y) {
  sum_slots_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(slots, n_slots, n, y);
}

cudaStream_t& launch_stream() {
  static thread_local cudaStream_t s = nullptr;
  return s;
}

}  // namespace ds4::cuda
