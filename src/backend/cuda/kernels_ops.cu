// Per-token kernels of the forward pass other than matvec: norms, hyper-connections, RoPE,
// KV quantization round trips, compressor, indexer, sink attention, router, SwiGLU. Each is a
// direct port of the CPU unit named in kernels.h, keeping its operation order so results match
// to the last bit except where f64-evaluated exp/log1p round differently from glibc expf/log1pf.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// exp and log1p evaluated in f64 and rounded once to f32: the correctly rounded result, which
// glibc's expf (< 0.502 ulp) also gives in all but rare halfway cases; CUDA's expf (2 ulp) would
// flip activation quantization codes and discrete top-k choices far more often.
__device__ float exp_f(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ float log1p_f(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

// model::detail::dot_f32: 8 interleaved partial sums, fixed tree, serial tail.
__device__ float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// model::rms_norm family; one block per row. The sum of squares follows
// detail::sum_squares_f64 (4 f64 lanes, then (0+2)+(1+3), then the tail).
__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int64_t dim, float eps) {
  __shared__ double lanes[4];
  __shared__ float scale;
  const float* xr = x + blockIdx.x * dim;
  float* orow = out + blockIdx.x * dim;
  if (threadIdx.x < 4) {
    double acc = 0;
    const int64_t full = dim / 4 * 4;
    for (int64_t i = threadIdx.x; i < full; i += 4) acc += static_cast<double>(xr[i]) * xr[i];
    lanes[threadIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    for (int64_t i = dim / 4 * 4; i < dim; ++i) s += static_cast<double>(xr[i]) * xr[i];
    scale = 1.0f / sqrtf(static_cast<float>(s / static_cast<double>(dim)) + eps);
  }
  __syncthreads();
  const float s = scale;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    orow[i] = w ? xr[i] * s * w[i] : xr[i] * s;
}

__global__ void hc_sinkhorn_pre_kernel(const float* mix, const float* scale, const float* base,
                                       int n, int iters, float eps, const float* x, int64_t d,
                                       float* pre, float* post, float* comb, float* sub_in) {
  __shared__ float s_pre[16];
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) {
      const float z = mix[i] * scale[0] + base[i];
      pre[i] = s_pre[i] = 1.0f / (1.0f + exp_f(-z)) + eps;
    }
    for (int i = 0; i < n; ++i) {
      const float z = mix[n + i] * scale[1] + base[n + i];
      post[i] = 2.0f / (1.0f + exp_f(-z));
    }
    float m[256];
    const float* lm = mix + 2 * n;
    const float* lb = base + 2 * n;
    for (int r = 0; r < n; ++r) {
      float* row = m + n * r;
      float row_max = -1.0e30f;
      for (int c = 0; c < n; ++c) {
        row[c] = lm[n * r + c] * scale[2] + lb[n * r + c];
        if (row[c] > row_max) row_max = row[c];
      }
      float sum = 0.0f;
      for (int c = 0; c < n; ++c) {
        row[c] = exp_f(row[c] - row_max);
        sum += row[c];
      }
      const float inv = 1.0f / sum;
      for (int c = 0; c < n; ++c) row[c] = row[c] * inv + eps;
    }
    for (int it = 0; it < iters; ++it) {
      if (it > 0)
        for (int r = 0; r < n; ++r) {
          float* row = m + n * r;
          float sum = 0.0f;
          for (int c = 0; c < n; ++c) sum += row[c];
          const float inv = 1.0f / (sum + eps);
          for (int c = 0; c < n; ++c) row[c] *= inv;
        }
      for (int c = 0; c < n; ++c) {
        float sum = 0.0f;
        for (int r = 0; r < n; ++r) sum += m[c + n * r];
        const float inv = 1.0f / (sum + eps);
        for (int r = 0; r < n; ++r) m[c + n * r] *= inv;
      }
    }
    for (int i = 0; i < n * n; ++i) comb[i] = m[i];
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < d; i += gridDim.x * blockDim.x) {
    float o = 0.0f;
    for (int r = 0; r < n; ++r) o += x[r * d + i] * s_pre[r];
    sub_in[i] = o;
  }
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

__global__ void rope_kernel(float* x, int n_heads, int64_t head_dim, RopeCs cs, float sign) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<int64_t>(n_heads) * cs.n_pair) return;
  const int64_t h = k / cs.n_pair;
  const int p = static_cast<int>(k % cs.n_pair);
  float* t = x + h * head_dim + head_dim - 2 * cs.n_pair;
  const float c = cs.cos[p];
  const float s = sign * cs.sin[p];
  const float x0 = t[2 * p], x1 = t[2 * p + 1];
  t[2 * p] = x0 * c - x1 * s;
  t[2 * p + 1] = x0 * s + x1 * c;
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

// One thread per 64-value FP8 block.
__global__ void fp8_kernel(float* x, int64_t n) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t off = b * 64;
  if (off >= n) return;
  round_trip_block<true>(x + off, n - off < 64 ? n - off : 64);
}

__global__ void kv_store_kernel(float* row, int64_t dim, int64_t n_fp8, float* dst) {
  const int64_t nb = (n_fp8 + 63) / 64;
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
    const int64_t off = b * 64;
    round_trip_block<true>(row + off, n_fp8 - off < 64 ? n_fp8 - off : 64);
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __half2float(__float2half_rn(row[i]));
    row[i] = v;
    dst[i] = v;
  }
}

// One thread per row: Hadamard butterfly (model::hadamard), then FP4 blocks of 32.
__global__ void indexer_qat_kernel(float* x, int n_rows, int64_t dim) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  float* v = x + static_cast<int64_t>(r) * dim;
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

__global__ void round_f16_copy_kernel(const float* x, int64_t n, float* dst) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = __half2float(__float2half_rn(x[i]));
}

__global__ void compressor_store_kernel(const float* kv, const float* score, const float* ape,
                                        int64_t width, uint32_t ratio, uint32_t pos,
                                        int64_t state_row, float* state_kv, float* state_score) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= width) return;
  const float* a = ape + static_cast<int64_t>(pos % ratio) * width;
  state_kv[state_row * width + j] = kv[j];
  state_score[state_row * width + j] = score[j] + a[j];
}

__global__ void compressor_pool_kernel(const float* kv, const float* sc, uint32_t ratio,
                                       int64_t d, float* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  const int64_t width = (ratio == 4 ? 2 : 1) * d;
  constexpr float kEmpty = -1.0e30f;
  constexpr float kAllEmpty = kEmpty * 0.5f;
  float max_score = kEmpty, denom = 0.0f, sum = 0.0f;
  if (ratio == 4) {
    for (int r = 0; r < 4; ++r) {
      max_score = fmaxf(max_score, sc[r * width + j]);
      max_score = fmaxf(max_score, sc[(4 + r) * width + d + j]);
    }
    if (max_score <= kAllEmpty) {
      out[j] = 0.0f;
      return;
    }
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
    if (max_score <= kAllEmpty) {
      out[j] = 0.0f;
      return;
    }
    for (uint32_t r = 0; r < ratio; ++r) {
      const float w = exp_f(sc[r * width + j] - max_score);
      denom += w;
      sum += w * kv[r * width + j];
    }
  }
  out[j] = denom > 0.0f ? sum / denom : 0.0f;
}

__global__ void compressor_shift_kernel(float* kv, float* sc, int64_t width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= 4 * width) return;
  kv[i] = kv[4 * width + i];
  sc[i] = sc[4 * width + i];
}

__global__ void indexer_scores_kernel(const float* q, const float* w, int n_head, int64_t dim,
                                      const float* rows, int64_t n_rows, float* scores) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= n_rows) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim * n_head));
  const float* row = rows + c * dim;
  float s = 0.0f;
  for (int h = 0; h < n_head; ++h) {
    const float dot = dot8(row, q + h * dim, dim);
    s += fmaxf(dot, 0.0f) * (w[h] * scale);
  }
  scores[c] = s;
}

// Rank of each row under "higher score first, NaN last, lower id on ties"; the k best are
// marked, then compacted in ascending id order.
__device__ bool higher(const float* s, int64_t a, int64_t b) {
  const float sa = s[a], sb = s[b];
  const bool na = isnan(sa), nb = isnan(sb);
  if (na != nb) return nb;
  if (!na && sa != sb) return sa > sb;
  return a < b;
}

__global__ void top_k_rank_kernel(const float* s, int64_t n, int64_t k, uint32_t* flag) {
  const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (a >= n) return;
  int64_t rank = 0;
  for (int64_t b = 0; b < n && rank < k; ++b)
    if (b != a && higher(s, b, a)) ++rank;
  flag[a] = rank < k ? 1u : 0u;
}

__global__ void top_k_compact_kernel(const uint32_t* flag, int64_t n, uint32_t* sel) {
  int64_t m = 0;
  for (int64_t a = 0; a < n; ++a)
    if (flag[a]) sel[m++] = static_cast<uint32_t>(a);
}

// One block per head.
__global__ void sink_attention_kernel(const float* q, const float* sinks, int64_t dim,
                                      const float* raw, int64_t raw_cap, int64_t lo, int64_t p,
                                      const float* comp, int64_t n_comp, const uint32_t* sel,
                                      int64_t n_sel, float* scratch, float* out) {
  const int h = blockIdx.x;
  const int64_t n_win = p - lo + 1;
  const int64_t n_c = sel ? n_sel : n_comp;
  const int64_t n_rows = n_win + n_c;
  float* score = scratch + h * n_rows;
  const float* qh = q + h * dim;
  auto row = [&](int64_t j) -> const float* {
    if (j < n_win) return raw + ((lo + j) % raw_cap) * dim;
    const int64_t c = j - n_win;
    return comp + (sel ? static_cast<int64_t>(sel[c]) : c) * dim;
  };
  const float kq_scale = 1.0f / sqrtf(static_cast<float>(dim));
  for (int64_t j = threadIdx.x; j < n_rows; j += blockDim.x) score[j] = dot8(qh, row(j), dim) * kq_scale;
  __syncthreads();
  __shared__ float s_inv;
  if (threadIdx.x == 0) {
    float m = sinks[h];
    for (int64_t j = 0; j < n_rows; ++j) m = fmaxf(m, score[j]);
    float denom = exp_f(sinks[h] - m);
    for (int64_t j = 0; j < n_rows; ++j) {
      const float w = exp_f(score[j] - m);
      denom += w;
      score[j] = w;
    }
    s_inv = 1.0f / denom;
  }
  __syncthreads();
  float* oh = out + h * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float o = 0.0f;
    for (int64_t j = 0; j < n_rows; ++j) o += score[j] * row(j)[i];
    oh[i] = o * s_inv;
  }
}

__device__ float softplus(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return exp_f(z);
  return log1p_f(exp_f(z));
}

__global__ void router_kernel(const float* logits, int n, const float* bias, const int32_t* tid2eid,
                              int32_t token, int k, float scale, float* p, int32_t* sel,
                              float* weights, int32_t* order) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) p[e] = sqrtf(softplus(logits[e]));
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (tid2eid) {
    for (int i = 0; i < k; ++i) sel[i] = tid2eid[static_cast<int64_t>(token) * k + i];
  } else {  // model::router_select_top_k insertion order
    int filled = 0;
    auto beats = [](float a, float b) { return a > b || (isnan(b) && !isnan(a)); };
    for (int e = 0; e < n; ++e) {
      const float s = bias ? p[e] + bias[e] : p[e];
      int j = 0;
      while (j < filled) {
        const float sj = bias ? p[sel[j]] + bias[sel[j]] : p[sel[j]];
        if (beats(s, sj)) break;
        ++j;
      }
      if (j >= k) continue;
      for (int m = (filled < k ? filled : k - 1); m > j; --m) sel[m] = sel[m - 1];
      sel[j] = e;
      if (filled < k) ++filled;
    }
  }
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

__global__ void moe_combine_kernel(const float* down, const int32_t* order, int n_used, int64_t d,
                                   const float* shared, float* y) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  float m = 0.0f;
  for (int i = 0; i < n_used; ++i) m += down[order[i] * d + j];
  y[j] = m + shared[j];
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int64_t dim, int n_rows, float eps) {
  rms_norm_kernel<<<n_rows, kThreads>>>(x, weight, out, dim, eps);
}

void hc_sinkhorn_pre(const float* mix, const float* scale, const float* base, int n_hc, int iters,
                     float eps, const float* x, int64_t d, float* pre, float* post, float* comb,
                     float* sub_in) {
  hc_sinkhorn_pre_kernel<<<1, kThreads>>>(mix, scale, base, n_hc, iters, eps, x, d, pre, post,
                                          comb, sub_in);
}

void hc_post(const float* y, const float* x, const float* post, const float* comb, int n_hc,
             int64_t d, float* out) {
  hc_post_kernel<<<blocks_for(n_hc * d), kThreads>>>(y, x, post, comb, n_hc, d, out);
}

void hc_output(const float* logits, const float* scale, const float* base, int n_hc, float eps,
               const float* x, int64_t d, float* z) {
  hc_output_kernel<<<1, kThreads>>>(logits, scale, base, n_hc, eps, x, d, z);
}

void rope_tail(float* x, int n_heads, int64_t head_dim, const RopeCs& cs, bool inverse) {
  rope_kernel<<<blocks_for(static_cast<int64_t>(n_heads) * cs.n_pair), kThreads>>>(
      x, n_heads, head_dim, cs, inverse ? -1.0f : 1.0f);
}

void kv_store(float* row, int64_t dim, int64_t n_fp8, float* dst) {
  kv_store_kernel<<<1, kThreads>>>(row, dim, n_fp8, dst);
}

void compressor_store(const float* kv, const float* score, const float* ape, int64_t width,
                      uint32_t ratio, uint32_t pos, int64_t state_row, float* state_kv,
                      float* state_score) {
  compressor_store_kernel<<<blocks_for(width), kThreads>>>(kv, score, ape, width, ratio, pos,
                                                           state_row, state_kv, state_score);
}

void compressor_pool(const float* state_kv, const float* state_score, uint32_t ratio, int64_t d,
                     float* out) {
  compressor_pool_kernel<<<blocks_for(d), kThreads>>>(state_kv, state_score, ratio, d, out);
}

void compressor_shift(float* state_kv, float* state_score, int64_t width) {
  compressor_shift_kernel<<<blocks_for(4 * width), kThreads>>>(state_kv, state_score, width);
}

void fp8_round_trip(float* x, int64_t n) {
  fp8_kernel<<<blocks_for((n + 63) / 64), kThreads>>>(x, n);
}

void indexer_qat(float* x, int n_rows, int64_t dim) {
  indexer_qat_kernel<<<blocks_for(n_rows), kThreads>>>(x, n_rows, dim);
}

void round_f16_copy(const float* x, int64_t n, float* dst) {
  round_f16_copy_kernel<<<blocks_for(n), kThreads>>>(x, n, dst);
}

void indexer_scores(const float* q, const float* w, int n_head, int64_t dim, const float* rows,
                    int64_t n_rows, float* scores) {
  indexer_scores_kernel<<<blocks_for(n_rows), kThreads>>>(q, w, n_head, dim, rows, n_rows, scores);
}

void indexer_top_k(const float* scores, int64_t n, int64_t k, uint32_t* sel) {
  // The flags live past the k selected ids in `sel` (the caller sizes it n + k).
  uint32_t* flag = sel + k;
  top_k_rank_kernel<<<blocks_for(n), kThreads>>>(scores, n, k, flag);
  top_k_compact_kernel<<<1, 1>>>(flag, n, sel);
}

void sink_attention(const float* q, const float* sinks, int n_head, int64_t dim, const float* raw,
                    int64_t raw_cap, int64_t lo, int64_t p, const float* comp, int64_t n_comp,
                    const uint32_t* sel, int64_t n_sel, float* scratch, float* out) {
  sink_attention_kernel<<<n_head, kThreads>>>(q, sinks, dim, raw, raw_cap, lo, p, comp, n_comp,
                                              sel, n_sel, scratch, out);
}

void router(const float* logits, int n_expert, const float* bias, const int32_t* tid2eid,
            int32_t token, int n_used, float scale, float* probs, int32_t* sel, float* weights,
            int32_t* order) {
  router_kernel<<<1, kThreads>>>(logits, n_expert, bias, tid2eid, token, n_used, scale, probs, sel,
                                 weights, order);
}

void swiglu(const float* gate, const float* up, int groups, int64_t n, float clamp, const float* w,
            float* out) {
  swiglu_kernel<<<blocks_for(groups * n), kThreads>>>(gate, up, groups, n, clamp, w, out);
}

void moe_combine(const float* down, const int32_t* order, int n_used, int64_t d,
                 const float* shared, float* y) {
  moe_combine_kernel<<<blocks_for(d), kThreads>>>(down, order, n_used, d, shared, y);
}

}  // namespace ds4::cuda
