// Activation quantization on the device, as warp-collective block quantizers shared by the
// quantize kernels and the kernels that quantize their own output (the HC pre kernel, the fused
// norm, SwiGLU): quant::ref::quantize_q8_0_act / quantize_q8_k bit for bit. Included by .cu files
// only (each gets its own copy).
#pragma once

#include <cstdint>

namespace ds4::cuda {
namespace {

// Block layouts of src/quant/blocks.h (byte-identical structs).
struct BQ8_0Act { float d; int8_t qs[32]; };
struct BQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(BQ8_0Act) == 36 && sizeof(BQ8_K) == 292, "activation block layouts");

constexpr unsigned kQuantFull = 0xffffffffu;

// quant::ref::round_clamp_i8: saturate (NaN -> -128), then round half to even.
__device__ int8_t round_clamp_i8(float v) {
  float c = v > -128.0f ? v : -128.0f;
  c = c < 127.0f ? c : 127.0f;
  return static_cast<int8_t>(__float2int_rn(c));
}

// One 32-value Q8_0 activation block, lane j owning value j (the whole warp calls it). The max
// of |x| does not depend on the order it is taken in, so the result is the reference's exactly.
__device__ void quantize_q8_0_block(float v, int lane, BQ8_0Act* out) {
  float amax = fmaxf(0.0f, fabsf(v));  // NaN -> 0: an all-NaN block scales by 0, as the reference
  for (int off = 16; off >= 1; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kQuantFull, amax, off));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (isinf(id)) {
    if (lane == 0) out->d = 0.0f;
    out->qs[lane] = 0;
    return;
  }
  if (lane == 0) out->d = d;
  out->qs[lane] = round_clamp_i8(v * id);
}

// Four consecutive int8 values packed little-endian, for one 32-bit store (every activation
// block's qs starts 4 bytes into a 4-byte aligned block).
__device__ uint32_t pack_i8x4(const int8_t* q) {
  return static_cast<uint8_t>(q[0]) | static_cast<uint32_t>(static_cast<uint8_t>(q[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(q[2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(q[3])) << 24;
}

// Eight Q8_0 activation blocks (256 values), lane l owning values 8(l%4)..8(l%4)+7 of block
// l/4 (the whole warp calls it; lanes with live false take part in the shuffles but store
// nothing). Same values as quantize_q8_0_block: the max of |x| over the block (fmaxf, order-free,
// NaN ignored) then the same scale and rounding, with 2 shuffles instead of 5 and 32-bit stores.
__device__ void quantize_q8_0_blocks8(const float (&v)[8], int lane, bool live, BQ8_0Act* out) {
  float amax = 0.0f;  // fmaxf drops NaN, as the reference's "NaN never wins"
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = fmaxf(amax, __shfl_xor_sync(kQuantFull, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(kQuantFull, amax, 2));
  if (!live) return;
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int part = lane & 3;
  int8_t q[8];
  for (int j = 0; j < 8; ++j) q[j] = isinf(id) ? 0 : round_clamp_i8(v[j] * id);
  if (part == 0) out->d = isinf(id) ? 0.0f : d;
  uint32_t* qs = reinterpret_cast<uint32_t*>(out->qs + 8 * part);
  qs[0] = pack_i8x4(q);
  qs[1] = pack_i8x4(q + 4);
}

// One 256-value Q8_K block, lane l owning values 8l..8l+7 (the whole warp calls it). The
// reference keeps the first value of largest |x| (its sign sets the scale's sign): the warp
// takes the largest |x| and, among equal ones, the lowest index; value(i) returns value i.
template <class Value>
__device__ void quantize_q8_k_block(const float (&v)[8], int lane, BQ8_K* y, Value value) {
  float amax = 0.0f;
  int at = 1 << 30;
  for (int j = 0; j < 8; ++j) {
    const float ax = fabsf(v[j]);
    if (ax > amax) {
      amax = ax;
      at = 8 * lane + j;
    }
  }
  for (int off = 16; off >= 1; off >>= 1) {
    const float oa = __shfl_xor_sync(kQuantFull, amax, off);
    const int oi = __shfl_xor_sync(kQuantFull, at, off);
    if (oa > amax || (oa == amax && oi < at)) {
      amax = oa;
      at = oi;
    }
  }
  const float max = amax != 0.0f ? value(at) : 0.0f;
  const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
  if (amax == 0.0f || isinf(iscale)) {
    if (lane == 0) y->d = 0.0f;
    for (int j = 0; j < 8; ++j) y->qs[8 * lane + j] = 0;
    if (lane < 16) y->bsums[lane] = 0;
    return;
  }
  int sum = 0;
  int8_t q[8];
  for (int j = 0; j < 8; ++j) {
    q[j] = round_clamp_i8(iscale * v[j]);
    sum += q[j];
  }
  uint32_t* qs = reinterpret_cast<uint32_t*>(y->qs + 8 * lane);
  qs[0] = pack_i8x4(q);
  qs[1] = pack_i8x4(q + 4);
  sum += __shfl_xor_sync(kQuantFull, sum, 1);  // 16-value group = lanes 2g, 2g+1
  if ((lane & 1) == 0) y->bsums[lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) y->d = 1.0f / iscale;
}

// Q8_0 blocks of a row the block holds in registers, value k of thread t being element
// k * blockDim.x + t: each warp then holds whole blocks (blockDim.x and dim multiples of 32), so
// the blocks need no barrier and no read-back of the row; the same bytes as block_quantize_row.
// The whole block calls it.
template <int N>
__device__ void block_quantize_q8_0_regs(const float (&v)[N], int64_t dim, uint8_t* q8_0) {
  const int lane = threadIdx.x & 31;
  // quantize_q8_0_block for the N blocks at once, without its early return, so that their
  // shuffles and divisions overlap instead of running one block after the other.
  float amax[N];
#pragma unroll
  for (int k = 0; k < N; ++k) amax[k] = fmaxf(0.0f, fabsf(v[k]));  // NaN -> 0, as quantize_q8_0_block
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) amax[k] = fmaxf(amax[k], __shfl_xor_sync(kQuantFull, amax[k], off));
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int64_t i0 = k * static_cast<int64_t>(blockDim.x) + (threadIdx.x - lane);  // warp-uniform
    if (i0 >= dim) continue;
    const float d = amax[k] / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const bool zero = isinf(id);
    BQ8_0Act* out = reinterpret_cast<BQ8_0Act*>(q8_0) + i0 / 32;
    if (lane == 0) out->d = zero ? 0.0f : d;
    out->qs[lane] = zero ? 0 : round_clamp_i8(v[k] * id);
  }
}

// Quantizes row[0..dim) (written by this block before a __syncthreads) with the block's warps:
// into Q8_0 blocks at q8_0 (dim % 32 == 0) and Q8_K blocks at q8_k (dim % 256 == 0); a null
// output is skipped. The whole block calls it.
__device__ void block_quantize_row(const float* row, int64_t dim, uint8_t* q8_0, uint8_t* q8_k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  if (q8_0)
    for (int64_t b = warp; b < dim / 32; b += warps)
      quantize_q8_0_block(row[b * 32 + lane], lane, reinterpret_cast<BQ8_0Act*>(q8_0) + b);
  if (q8_k)
    for (int64_t b = warp; b < dim / 256; b += warps) {
      const float* xb = row + b * 256;
      float v[8];
      for (int j = 0; j < 8; ++j) v[j] = xb[8 * lane + j];
      quantize_q8_k_block(v, lane, reinterpret_cast<BQ8_K*>(q8_k) + b, [&](int i) { return xb[i]; });
    }
}

}  // namespace
}  // namespace ds4::cuda
