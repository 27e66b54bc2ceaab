// Device helpers shared by the CUDA backend's kernel files (kernels_*.cu): the launch stream,
// exp/log1p rounded like glibc, block-wide RMS scales and norms, the RoPE pair rotation, the
// FP8/FP4 KV round trips and the indexer QAT. Each is a port of the CPU unit named beside it and
// keeps its operation order. Included by .cu files only (each gets its own copy).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/launch_stream.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/phase_stamps.cuh"
#include "common/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t stream() { return launch_stream(); }

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// The current device's SM count (1 when it cannot be queried).
int sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n > 0 ? n : 1;
}

// The current device's compute capability major version (0 when it cannot be queried).
int cc_major() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return 0;
  return major;
}

// Programmatic dependent launch (see pdl_enabled). Every kernel launched by launch_k calls
// pdl_wait() before it reads or writes any buffer another kernel touches, and pdl_trigger() so
// the next kernel may be scheduled early. Before the wait a kernel may read only constant
// weights and data complete before the launch preceding it on the same stream (every kernel
// waits before it triggers: inputs written two or more launches back, or by earlier steps;
// never a side stream's output of this step), e.g. the decode attention's older KV rows.
// (pdl_wait and pdl_trigger: backend/cuda/pdl.cuh.)

// Launches `kernel` on the launch stream, with programmatic stream serialization when
// pdl_enabled() and no PdlOffGuard holds it off. Launch errors surface at the next check of
// cudaGetLastError (as <<<>>>).
template <typename... Params, typename... Args>
void launch_k(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = launch_stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() && !pdl_suppressed() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device (an opt-in
// when they and its `static_bytes` pass 48 KiB; per device, so it is set at every launch: cheap
// on the host, thread-safe for expert-parallel ranks on several devices, and captured graphs keep
// the launch's size). Launchers choose shapes within smem_limit(); one that does not fit throws
// ds4::Error here rather than fail at launch (or pass on a larger GPU than the emulated one).
void allow_dynamic_smem(const void* kernel, size_t bytes, size_t static_bytes = 0) {
  if (const size_t limit = smem_limit(); bytes + static_bytes > limit)
    fail("a CUDA kernel needs {} bytes of shared memory per block; this device allows {} (no smaller shape was "
         "chosen: a bug)", bytes + static_bytes, limit);
  if (bytes + static_bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

// exp and log1p evaluated in f64 and rounded once to f32: the correctly rounded result, which
// glibc's expf (< 0.502 ulp) also gives in all but rare halfway cases; CUDA's expf (2 ulp) would
// flip activation quantization codes and discrete top-k choices far more often.
__device__ float exp_f(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ float log1p_f(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

// A float as an unsigned key whose order is the floats' (-0 as +0), for integer compares, radix
// passes and max reductions (atomicMax, __reduce_max_sync): NaN maps to 0, below every number
// (-inf's key is 0x007fffff), and float_of_order_key gives back every number's value.
__device__ __forceinline__ uint32_t float_order_key(float v) {
  if (isnan(v)) return 0u;
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float float_of_order_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}

// 1 / (1 + e^-z) as the CPU units compute it (e^z / (1 + e^z) for negative z, no overflow).
__device__ float sigmoid_f(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + exp_f(-z));
  const float e = exp_f(z);
  return e / (1.0f + e);
}

// model::expert_swiglu for one value: silu(min(g, clamp)) * clamp(u, +-clamp) * w (no clamp when
// clamp <= 1e-6; w is the expert's routing weight, 1 for the shared expert).
__device__ float swiglu_value(float g, float u, float clamp, float w) {
  if (clamp > 1.0e-6f) {
    if (g > clamp) g = clamp;
    if (u > clamp) u = clamp;
    if (u < -clamp) u = -clamp;
  }
  return g * sigmoid_f(g) * u * w;
}

// model::rms_scale's factor 1/sqrt(mean + eps) from the f64 sum of squares of dim values.
__device__ __forceinline__ float rms_scale_of_sum(double sum, int64_t dim, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(dim)) + eps);
}

// model::rms_norm family; one block per row. The f64 sum of squares is a block-wide tree here
// (the CPU's detail::sum_squares_f64 uses 4 sequential f64 lanes): the two differ by f64
// rounding only (relative ~1e-16), far below the f32 rounding of mean + eps that follows, so the
// f32 scale almost always agrees bit for bit (docs/parity.md).
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
    scale = rms_scale_of_sum(s, dim, eps);
  }
  __syncthreads();
  return scale;
}

// 1/sqrt(mean(x^2) + eps) of x[0, dim), computed by the whole block.
__device__ float block_rms_scale(const float* xr, int64_t dim, float eps) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) acc += static_cast<double>(xr[i]) * xr[i];
  return block_rms_from_partial(acc, dim, eps);
}

// block_rms_norm_row's register form, for rows of at most kNormRegs * blockDim.x values: every
// load issued before the first use; out = x * s [* w] is also left in hv (value k of thread t is
// element k * blockDim.x + t; 0 past dim), so a caller can quantize it without reading it back.
// ps: phase stamps in a -DDS4_CUDA_PHASE_STAMPS build (the loads landed and summed, the block's
// scale, the stores), else null.
constexpr int kNormRegs = 16;
__device__ __forceinline__ void block_rms_norm_regs(const float* xr, const float* w, float* orow, int64_t dim,
                                                    float eps, float (&hv)[kNormRegs], PhaseStamps* ps = nullptr) {
  float wv[kNormRegs];
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    hv[k] = i < dim ? xr[i] : 0.0f;
    wv[k] = w && i < dim ? w[i] : 1.0f;
  }
  double acc = 0;
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) acc += static_cast<double>(hv[k]) * hv[k];
  DS4_PHASE_PTR(ps);
  const float s = block_rms_from_partial(acc, dim, eps);
  DS4_PHASE_PTR(ps);
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    hv[k] = w ? hv[k] * s * wv[k] : hv[k] * s;
    if (i < dim) orow[i] = hv[k];
  }
  DS4_PHASE_PTR(ps);
}

// out = x * s [* w] for one row by the whole block. Rows of at most kNormRegs * blockDim.x values
// are held in registers (block_rms_norm_regs: a strided loop would wait one memory round trip per
// iteration, in-order issue), and out may alias x. Longer rows loop.
__device__ void block_rms_norm_row(const float* xr, const float* w, float* orow, int64_t dim, float eps) {
  if (dim > kNormRegs * static_cast<int64_t>(blockDim.x)) {
    const float s = block_rms_scale(xr, dim, eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = w ? xr[i] * s * w[i] : xr[i] * s;
    return;
  }
  float hv[kNormRegs];
  block_rms_norm_regs(xr, w, orow, dim, eps, hv);
}

// Rotation of pair p of a tail by the angles of `cs` ([cos n_pair][sin n_pair]).
__device__ void rope_pair(float* t, const float* cs, int n_pair, int p, float sign) {
  const float c = cs[p];
  const float s = sign * cs[n_pair + p];
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

// One block's round trip at the scale its largest |x| sets (model::kv_quant round_trip_block): the
// floored amax / qmax's power-of-two scale, then per value the E4M3 (FP8) or E2M1 (FP4) rounding
// of |x| / scale, saturated at qmax, signed and scaled back.
template <bool kFp8>
struct RoundTrip {
  static constexpr float kQmax = kFp8 ? 448.0f : 6.0f;
  float scale, inv_scale;
  __device__ explicit RoundTrip(float amax) {
    const float floor_v = kFp8 ? 1.0e-4f : 7.052966104933725e-38f;
    if (amax < floor_v) amax = floor_v;
    const int e = ceil_log2(amax / kQmax);
    scale = ldexpf(1.0f, e);
    inv_scale = ldexpf(1.0f, -e);
  }
  __device__ float operator()(float x) const {
    const float v = x * inv_scale;
    const int32_t q_bits = __float_as_int(kFp8 ? e4m3_round_abs(fabsf(v)) : e2m1_round_abs(fabsf(v)));
    const int32_t qmax_bits = __float_as_int(kQmax);
    const uint32_t q = static_cast<uint32_t>(q_bits < qmax_bits ? q_bits : qmax_bits);
    const uint32_t sign = v < 0.0f ? 0x80000000u : 0u;
    return __uint_as_float(q | sign) * scale;
  }
};

// RoundTrip over x[0, n) by one thread.
template <bool kFp8>
__device__ void round_trip_block(float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float av = fabsf(x[i]);
    amax = av > amax ? av : amax;
  }
  const RoundTrip<kFp8> rt(amax);
  for (int64_t i = 0; i < n; ++i) x[i] = rt(x[i]);
}

// RoundTrip of the consecutive blocks of `blk` values of x[0, n) (the last one
// shorter when blk does not divide n), by the whole block's warps: warp w takes blocks w, w +
// warps, ..., lane l the block's values l, l + 32, ...; the block's largest |x| by shuffles (the
// serial scan's "larger replaces", which never takes a NaN, is a max over the other values: any
// order gives it), then each value's own rounding: round_trip_block's values exactly, with one
// memory round trip per value instead of a serial chain through the block. The whole block calls
// it; x's values are written by earlier code of the block before a barrier, and read after the
// next one.
template <bool kFp8>
__device__ void block_round_trip(float* x, int64_t n, int blk) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (int64_t b0 = static_cast<int64_t>(warp) * blk; b0 < n; b0 += static_cast<int64_t>(warps) * blk) {
    float* xb = x + b0;
    const int m = static_cast<int>(n - b0 < blk ? n - b0 : blk);
    float amax = 0.0f;
    for (int i = lane; i < m; i += 32) {
      const float av = fabsf(xb[i]);
      amax = av > amax ? av : amax;
    }
    for (int off = 16; off >= 1; off >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, amax, off);
      amax = o > amax ? o : amax;
    }
    const RoundTrip<kFp8> rt(amax);
    for (int i = lane; i < m; i += 32) xb[i] = rt(xb[i]);
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

// qat_row by the whole block on `v` in shared memory (dim a multiple of 32): each butterfly
// stage's pairs are disjoint, so running a stage's pairs in parallel gives the serial result
// exactly; the scale is elementwise and the FP4 blocks of 32 are block_round_trip's.
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
  block_round_trip<false>(v, dim, 32);
  __syncthreads();
}


}  // namespace
}  // namespace ds4::cuda
