// Activation quantizers, the grouped decode matvecs (chunked, streaming, and the row-slice
// K-quant / IQ2_XXS kernel) and the prefill's multi-token matvecs, templated on the weight
// format; weights are in the device row layout (weight_layout.cuh).
// Every dot reproduces quant::ref (src/quant/*.cpp) exactly: the same lane partition and
// reduction tree for F32/F16/BF16 (16 lanes) and Q8_0/MXFP4 (8 lanes), the same in-order block
// sum for Q2_K/Q4_K/IQ2_XXS, exact integer block dots, f32 scale products in the same order.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_stream.h"
#include "backend/cuda/weight_layout.cuh"

namespace ds4::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// Block layouts of src/quant/blocks.h (byte-identical structs).
struct BQ8_0 { uint16_t d; int8_t qs[32]; };
struct BQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct BQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BIq2 { uint16_t d; uint16_t qs[32]; };
struct BMxfp4 { uint8_t e; uint8_t qs[16]; };
static_assert(sizeof(BQ8_0) == 34 && sizeof(BQ8_0Act) == 36 && sizeof(BQ2_K) == 84 &&
              sizeof(BQ4_K) == 144 && sizeof(BIq2) == 66 && sizeof(BMxfp4) == 17 &&
              sizeof(BQ8_K) == 292);

// Lookup tables in global memory (read through L1): divergent per-lane indices would serialise
// in constant memory. The matvec copies the IQ2_XXS grid into shared memory per block.
__device__ uint64_t c_iq2_grid[256];
__device__ int8_t c_mx_doubled[16];
__device__ float c_mx_half[256];

__device__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }


// Sources of the values to quantize: load8 gives elements i..i+7 of row r (i a multiple of 8),
// by 16-byte loads where the address allows.
__device__ void load_f32x8(const float* p, float (&v)[8]) {
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    for (int j = 0; j < 8; ++j) v[j] = p[j];
  }
}
struct RowSrc {  // a plain f32 row
  const float* x;
  int64_t stride;
  __device__ void load8(int64_t r, int64_t i, float (&v)[8]) const { load_f32x8(x + r * stride + i, v); }
};
struct SwigluSrc {  // SwiGLU of expert hidden rows (swiglu_kernel's formula)
  const float* gate;
  const float* up;
  int64_t n;
  float clamp;
  const float* w;
  __device__ void load8(int64_t r, int64_t i, float (&v)[8]) const {
    float g[8], u[8];
    load_f32x8(gate + r * n + i, g);
    load_f32x8(up + r * n + i, u);
    const float wr = w ? w[r] : 1.0f;
    for (int j = 0; j < 8; ++j) v[j] = swiglu_value(g[j], u[j], clamp, wr);
  }
  __device__ float value(int64_t r, int64_t i) const {
    return swiglu_value(gate[r * n + i], up[r * n + i], clamp, w ? w[r] : 1.0f);
  }
};

// One warp per 8 Q8_0 blocks of a row (quantize_q8_0_blocks8; the row's last group may be
// partial). ncu, H200: the former warp per 32-value block took 644 us for the 16384 x 4096
// grouped attention output, ~8x its memory time.
template <class Src>
__global__ void quant_q8_0_kernel(Src src, int64_t cols, int rows, uint8_t* act, size_t act_bytes) {
  pdl_wait();
  pdl_trigger();
  const int64_t nb = cols / 32, ng = (nb + 7) / 8;
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (i >= ng * rows) return;  // uniform across the warp
  const int64_t r = i / ng, b = (i % ng) * 8 + lane / 4;
  const bool live = b < nb;
  float v[8] = {};
  if (live) src.load8(r, b * 32 + 8 * (lane & 3), v);
  quantize_q8_0_blocks8(v, lane, live, reinterpret_cast<BQ8_0Act*>(act + r * act_bytes) + b);
}

// Value k (0..255) of the 256 values a warp holds 8 per lane (lane l: values 8l..8l+7), for
// every lane (k uniform across the warp; the whole warp calls it).
__device__ __forceinline__ float warp_value8(const float (&v)[8], int k) {
  float mine = v[0];
#pragma unroll
  for (int t = 1; t < 8; ++t)
    if ((k & 7) == t) mine = v[t];
  return __shfl_sync(0xffffffffu, mine, k >> 3);
}

// One warp per 256-value block (quantize_q8_k_block). The block's largest value comes from the
// lane holding it (the value load8 produced), not from a second load and evaluation of the
// source after the warp's reduction (H100, perf-notes session 28: +0.1-0.3 %, within
// the spread; kept as the simpler of two equal forms).
template <class Src>
__global__ void quant_q8_k_kernel(Src src, int64_t cols, int rows, uint8_t* act, size_t act_bytes) {
  pdl_wait();
  pdl_trigger();
  const int64_t nb = cols / 256;
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (i >= nb * rows) return;
  const int64_t r = i / nb, b = i % nb;
  float v[8];
  src.load8(r, b * 256 + 8 * lane, v);
  BQ8_K* y = reinterpret_cast<BQ8_K*>(act + r * act_bytes) + b;
  quantize_q8_k_block(v, lane, y, [&](int k) { return warp_value8(v, k); });
}

// The SwiGLU of 256 values per block, one per thread, staged in shared memory and quantized by
// block_quantize_row: Q8_K block c of row r, or its Q8_0 blocks 8c .. 8c + 7. Grid: rows * cols
// / 256 blocks (cols % 256 == 0). Each value's f64 exp and division are a serial chain: with a
// lane evaluating 8 of them (SwigluSrc::load8 in quant_q8_k_kernel) the routed quantization ended
// ~8 us after gate/up on an H100, with one per thread ~5 us (perf-notes session 29).
__global__ void __launch_bounds__(256) swiglu_quant_kernel(SwigluSrc src, int64_t cols, bool q8_k, uint8_t* act,
                                                            size_t act_bytes) {
  pdl_wait();
  pdl_trigger();
  __shared__ float vals[256];
  const int64_t chunks = cols / 256, r = blockIdx.x / chunks, c = blockIdx.x % chunks;
  vals[threadIdx.x] = src.value(r, c * 256 + threadIdx.x);
  __syncthreads();
  uint8_t* out = act + r * act_bytes;
  if (q8_k) block_quantize_row(vals, 256, nullptr, out + c * sizeof(BQ8_K));
  else block_quantize_row(vals, 256, out + c * 8 * sizeof(BQ8_0Act), nullptr);
}

// ---- the matvec ------------------------------------------------------------------------------
//
// One warp per output row, kMvWarps rows per block, blockIdx.y the group. The warp stages its
// row through shared memory in chunks of whole blocks with coalesced 16-byte loads (all issued
// before the first use); the block stages the matching activation slice once for its rows; the
// dot products then read shared memory only. The arithmetic keeps quant::ref's
// order exactly: integer block dots are split across lanes (integer sums are exact in any
// order), and the float steps run in the reference's order:
//   F32/F16/BF16: element i into lane i mod 16, tree (l, l+8), (l, l+4), (l, l+2), (0, 1);
//   Q8_0/MXFP4:   block b into accumulator b mod 8 (4 lanes per block), tree (l,l+4),(l,l+2),(0,1);
//   Q2_K/Q4_K/IQ2_XXS: per-block values (8 lanes per block) summed in block order.

constexpr int kMvWarps = 8;
constexpr int kMvChunk = 4096;  // staging bytes per warp

template <uint32_t T> struct Fmt;
template <> struct Fmt<kF32> { static constexpr int kBytes = 4, kVals = 1; };
template <> struct Fmt<kF16> { static constexpr int kBytes = 2, kVals = 1; };
template <> struct Fmt<kBF16> { static constexpr int kBytes = 2, kVals = 1; };
template <> struct Fmt<kQ8_0> { static constexpr int kBytes = 34, kVals = 32; };
template <> struct Fmt<kMXFP4> { static constexpr int kBytes = 17, kVals = 32; };
template <> struct Fmt<kQ2_K> { static constexpr int kBytes = 84, kVals = 256; };
template <> struct Fmt<kQ4_K> { static constexpr int kBytes = 144, kVals = 256; };
template <> struct Fmt<kIQ2_XXS> { static constexpr int kBytes = 66, kVals = 256; };

// Blocks per staged chunk: a multiple of 16 blocks, so every chunk starts 16-byte aligned
// (16 * block bytes is a multiple of 16) and on a multiple of 8 blocks (Q8_0 accumulators).
template <uint32_t T>
struct Chunk { static constexpr int kBlocks = (kMvChunk / Fmt<T>::kBytes) / 16 * 16; };

__device__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ int ld32(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }

// Block j of a region of nb weight blocks in the device layout (weight_layout.cuh): q the
// payload, t the scale field. For formats stored as in GGUF both point at the block's start.
struct Blk {
  const uint8_t* q;
  const uint8_t* t;
};
template <uint32_t T>
__device__ Blk blk(const uint8_t* base, int64_t nb, int64_t j) {
  if constexpr (Split<T>::kOn)
    return {base + j * Split<T>::kBulk, base + nb * Split<T>::kBulk + j * Split<T>::kTail};
  else
    return {base + j * Fmt<T>::kBytes, base + j * Fmt<T>::kBytes};
}

struct Tables {
  uint64_t grid[256];
};

template <uint32_t T>
__device__ float load_w(const uint8_t* w, int i) {
  if constexpr (T == kF32) return reinterpret_cast<const float*>(w)[i];
  else if constexpr (T == kF16) return h2f(reinterpret_cast<const uint16_t*>(w)[i]);
  else return __uint_as_float(ld16(w + 2 * i) << 16);
}

// Q8_0/MXFP4 integer part: values 8*part .. 8*part+7 of block `wb` against activation `xb`.
template <uint32_t T>
__device__ int q8_part(Blk b, const uint8_t* xq, int part) {
  int isum = 0;
  if constexpr (T == kQ8_0) {
    const int2 w = *reinterpret_cast<const int2*>(b.q + 8 * part);  // split payload: 8-byte aligned
    isum = __dp4a(w.x, ld32(xq + 8 * part), 0);
    isum = __dp4a(w.y, ld32(xq + 8 * part + 4), isum);
  } else {
    const uint8_t* wb = b.q;
    const auto* xs = reinterpret_cast<const int8_t*>(xq);
    for (int t = 0; t < 8; ++t) {
      const int j = 8 * part + t;
      const int code = j < 16 ? (wb[1 + j] & 15) : (wb[1 + j - 16] >> 4);
      isum += c_mx_doubled[code] * xs[j];
    }
  }
  return isum;
}

// One IQ2_XXS signed 4-value word: values 8e + 4h .. +3 of a 32-value group whose 8 bytes are
// aw0 (grid indices) and aw1 (signs, scale). ksigns_iq2xs[s] = s | parity(s) << 7 (an even
// number of minus signs per 8 values) is computed, not looked up, to spare the shared-memory
// pipe; m01 has byte 1 where a value is negated, and as grid bytes are 8..43, (g ^ 0xff) + 1 = -g
// per byte never carries into the next byte.
__device__ __forceinline__ int iq2_word(uint32_t aw0, uint32_t aw1, int e, int h, const Tables& tab) {
  const uint64_t grid = tab.grid[(aw0 >> (8 * e)) & 0xff];
  const uint32_t s7 = (aw1 >> (7 * e)) & 127;
  const uint32_t signs = s7 | ((__popc(s7) & 1u) << 7);
  const uint32_t m01 = (((signs >> (4 * h)) & 15) * 0x00204081u) & 0x01010101u;
  const uint32_t gw = static_cast<uint32_t>(grid >> (32 * h));
  return static_cast<int>((gw ^ (m01 * 0xffu)) + m01);
}

// K-quant / IQ2_XXS integer parts of one block: lane `part` of 8. `isum` is the scaled code
// dot, `summs` the min correction (Q2_K/Q4_K).
template <uint32_t T>
__device__ void k_part(Blk b, const uint8_t* yb, int part, const Tables& tab, int& isum, int& summs) {
  const uint8_t* wb = b.q;
  const uint8_t* yq = yb + 4;
  const auto* bsums = reinterpret_cast<const int16_t*>(yb + 260);
  if constexpr (T == kQ2_K) {
    const uint8_t* qs = wb + 16 + 32 * (part / 4);
    const int shift = 2 * (part % 4);
    int sub0 = 0, sub1 = 0;
    for (int m = 0; m < 4; ++m) {
      sub0 = __dp4a((ld32(qs + 4 * m) >> shift) & 0x03030303, ld32(yq + 32 * part + 4 * m), sub0);
      sub1 = __dp4a((ld32(qs + 16 + 4 * m) >> shift) & 0x03030303, ld32(yq + 32 * part + 16 + 4 * m), sub1);
    }
    const int s0 = wb[2 * part], s1 = wb[2 * part + 1];
    isum = (s0 & 15) * sub0 + (s1 & 15) * sub1;
    summs = bsums[2 * part] * (s0 >> 4) + bsums[2 * part + 1] * (s1 >> 4);
  } else if constexpr (T == kQ4_K) {
    const int j = part;
    const uint8_t* s = wb + 4;
    int sc, mn;
    if (j < 4) {
      sc = s[j] & 63;
      mn = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
      mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const uint8_t* qs = wb + 16 + 32 * (j / 2);
    const int shift = 4 * (j & 1);
    int sub = 0;
    for (int m = 0; m < 8; ++m)
      sub = __dp4a((ld32(qs + 4 * m) >> shift) & 0x0f0f0f0f, ld32(yq + 32 * j + 4 * m), sub);
    isum = sc * sub;
    summs = mn * (bsums[2 * j] + bsums[2 * j + 1]);
  } else {  // IQ2_XXS: group `part` of 32 values
    const uint2 a = *reinterpret_cast<const uint2*>(b.q + 8 * part);  // split payload
    const uint32_t a0 = a.x, a1 = a.y;
    int sumi = 0;
    for (int g = 0; g < 4; ++g)
      for (int h = 0; h < 2; ++h) sumi = __dp4a(iq2_word(a0, a1, g, h, tab), ld32(yq + 32 * part + 8 * g + 4 * h), sumi);
    isum = sumi * static_cast<int>(2 * (a1 >> 28) + 1);
    summs = 0;
  }
}

template <uint32_t T>
__device__ float k_block_value(Blk b, const uint8_t* yb, int isum, int summs) {
  const float yd = *reinterpret_cast<const float*>(yb);
  if constexpr (T == kIQ2_XXS) {
    const float d = h2f(ld16(b.t)) * yd;
    return d * static_cast<float>(isum);
  } else {
    const uint8_t* wb = b.q;
    const int off = T == kQ2_K ? 80 : 0;
    const float dall = yd * h2f(ld16(wb + off));
    const float dmin = yd * h2f(ld16(wb + off + 2));
    return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
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
  int rpw;  // rows per warp (1, or up to 4 for rows that fit one chunk together)
  bool ids_early;  // ids complete before the PDL wait (MatvecOp::ids_early; row-slice kernel)
};

// Activation bytes per weight block (f32 values, Q8_0 36-byte or Q8_K 292-byte blocks) and the
// shared-memory slice of one chunk's activation.
template <uint32_t T>
struct ActFmt {
  static constexpr int kBytes = Fmt<T>::kVals == 1 ? 4 : Fmt<T>::kVals == 32 ? 36 : 292;
  static constexpr int kSlice = Chunk<T>::kBlocks * kBytes;
};
constexpr int kActSliceMax = 14080;  // >= every format's kSlice (Q2_K, IQ2_XXS: 48 * 292)

// Adds the dot of one staged chunk (nb blocks of weights at sm, activations at xs) to the
// running value `acc` of this lane, in the reference order (see above).
template <uint32_t T>
__device__ float dot_chunk(const uint8_t* sm, const uint8_t* xs, int nb, int lane, const Tables& tab,
                           float acc) {
  constexpr int kAct = ActFmt<T>::kBytes;
  if constexpr (T == kF32 || T == kF16 || T == kBF16) {
    const auto* xf = reinterpret_cast<const float*>(xs);
    if (lane < 16) {
      int b0 = 0;
      for (; b0 + 64 <= nb; b0 += 64) {  // 4 groups of 16: loads first, adds in order
        const float p0 = load_w<T>(sm, b0 + lane) * xf[b0 + lane];
        const float p1 = load_w<T>(sm, b0 + 16 + lane) * xf[b0 + 16 + lane];
        const float p2 = load_w<T>(sm, b0 + 32 + lane) * xf[b0 + 32 + lane];
        const float p3 = load_w<T>(sm, b0 + 48 + lane) * xf[b0 + 48 + lane];
        acc = acc + p0;
        acc = acc + p1;
        acc = acc + p2;
        acc = acc + p3;
      }
      for (; b0 < nb; b0 += 16) {
        const int i = b0 + lane;
        const float p = i < nb ? load_w<T>(sm, i) * xf[i] : 0.0f;
        acc = acc + p;
      }
    }
  } else if constexpr (T == kQ8_0 || T == kMXFP4) {
    const int slot = lane >> 2, part = lane & 3;
    for (int j0 = 0; j0 < nb; j0 += 8) {  // uniform trip count: every lane shuffles
      const int j = j0 + slot;
      const bool on = j < nb;
      const Blk wb = blk<T>(sm, nb, j);
      const uint8_t* xb = xs + j * kAct;
      int isum = on ? q8_part<T>(wb, xb + 4, part) : 0;
      isum += __shfl_xor_sync(kFull, isum, 1);
      isum += __shfl_xor_sync(kFull, isum, 2);
      if (on) {
        const float xd = *reinterpret_cast<const float*>(xb);
        float s;
        if constexpr (T == kQ8_0) {
          const float scale = h2f(ld16(wb.t)) * xd;
          s = scale * static_cast<float>(isum);
        } else {
          s = (c_mx_half[wb.q[0]] * xd) * static_cast<float>(isum);
        }
        acc = acc + s;
      }
    }
  } else {
    const int grp = lane >> 3, part = lane & 7;
    for (int j0 = 0; j0 < nb; j0 += 4) {
      const int j = j0 + grp;
      float v = 0.0f;
      int isum = 0, summs = 0;
      const uint8_t* yb = xs + j * kAct;
      if (j < nb) k_part<T>(blk<T>(sm, nb, j), yb, part, tab, isum, summs);
      for (int off = 1; off < 8; off <<= 1) {
        isum += __shfl_xor_sync(kFull, isum, off);
        if constexpr (T != kIQ2_XXS) summs += __shfl_xor_sync(kFull, summs, off);  // IQ2_XXS has no mins
      }
      if (j < nb) v = k_block_value<T>(blk<T>(sm, nb, j), yb, isum, summs);
      const int cnt = nb - j0 < 4 ? nb - j0 : 4;
      for (int k = 0; k < cnt; ++k) acc = acc + __shfl_sync(kFull, v, 8 * k);
    }
  }
  return acc;
}

// The row's result on lane 0 from the lanes' running values (the reference's final tree).
template <uint32_t T>
__device__ float dot_finish(float acc) {
  if constexpr (T == kF32 || T == kF16 || T == kBF16) {
    for (int off = 8; off >= 1; off >>= 1) acc = acc + __shfl_down_sync(kFull, acc, off);
    return acc;
  } else if constexpr (T == kQ8_0 || T == kMXFP4) {
    for (int off = 16; off >= 4; off >>= 1) acc = acc + __shfl_down_sync(kFull, acc, off);
    return acc;
  } else {
    return T == kIQ2_XXS ? 0.125f * acc : acc;
  }
}

// Stages `bytes` (a multiple of 16 when kVec) from src into the warp's buffer (issued only;
// cp_async_wait + a barrier complete it).
template <bool kVec>
__device__ void stage_bytes(const uint8_t* src, int bytes, uint8_t* sm, int lane) {
  if constexpr (kVec) {
    const int n16 = bytes / 16;
    for (int idx = lane; idx < n16; idx += 32) cp_async16_weight(sm + 16 * idx, src + 16 * idx);
  } else {
    for (int i = lane; i < bytes; i += 32) sm[i] = src[i];
  }
}

// Stages blocks [c0, c0 + nb) of a row of nblk blocks (device layout) into `sm` as a region of
// nb blocks that blk<T>(sm, nb, j) reads: split formats get the payloads, then the scale fields
// (chunks start on multiples of 16 blocks, so with kVec both parts are 16-byte aligned; a last
// part that is not a multiple of 16 bytes is copied byte by byte). Issued only, as stage_bytes.
template <uint32_t T, bool kVec>
__device__ void stage_chunk(const uint8_t* row, int64_t nblk, int64_t c0, int nb, uint8_t* sm, int lane) {
  if constexpr (Split<T>::kOn) {
    constexpr int B = Split<T>::kBulk, TL = Split<T>::kTail;
    stage_bytes<kVec>(row + c0 * B, nb * B, sm, lane);
    const uint8_t* src = row + nblk * B + c0 * TL;
    uint8_t* dst = sm + nb * B;
    const int bytes = nb * TL, head = kVec ? bytes / 16 * 16 : 0;
    stage_bytes<kVec>(src, head, dst, lane);
    for (int i = head + lane; i < bytes; i += 32) dst[i] = src[i];
  } else {
    stage_bytes<kVec>(row + c0 * Fmt<T>::kBytes, nb * Fmt<T>::kBytes, sm, lane);
  }
}

// Bytes between the rows a warp stages together (rpw > 1): the row size rounded up to 16, so
// every staged row starts 16-byte aligned (the split payloads are read 8 bytes at a time).
__host__ __device__ inline size_t staged_row_stride(size_t row_bytes) { return (row_bytes + 15) / 16 * 16; }

// Stages rows [r0, r0 + n) (n * row_bytes bytes from `rows`) at staged_row_stride apart.
template <bool kVec>
__device__ void stage_rows(const uint8_t* rows, size_t row_bytes, int n, uint8_t* sm, int lane) {
  if (kVec) {  // row_bytes is a multiple of 16: one contiguous copy
    stage_bytes<kVec>(rows, n * static_cast<int>(row_bytes), sm, lane);
  } else {
    const size_t st = staged_row_stride(row_bytes);
    for (int k = 0; k < n; ++k) stage_bytes<false>(rows + k * row_bytes, static_cast<int>(row_bytes), sm + k * st, lane);
  }
}

// Up to two matvecs of one weight format per launch (blockIdx.z picks the job: e.g. the gate and
// up projections that read the same input); grid.x covers the larger job, the other job's extra
// blocks return at once.
struct MatvecJobs {
  MatvecArgs job[2];
  int q8_wide;  // streaming kernel, Q8_0: the 2-lanes-per-block dot (dot_q8_wide)
  int trigger;  // streaming / row-slice kernels: when dependents may launch (matvec_trigger_mode)
  // hc_post in the epilogue (MatvecOp::post; out null: none): single-job, single-group launches.
  // Read from the kernel parameters where used: as a MatvecArgs field (copied to registers with
  // the job) the streaming kernels spilled at their register cap.
  HcPostEpi post;
};

// Value c of row r of the hc_post in the epilogue: hc_post_kernel's formula and order (no FMA:
// --fmad=false), every load issued before the adds.
__device__ __forceinline__ void mv_post_one(const HcPostEpi& p, int c, int64_t r, float v) {
  float o = v * p.post[c];
#pragma unroll
  for (int k = 0; k < kMaxHcStreams; ++k)
    if (k < p.n_hc) o += p.comb[c + p.n_hc * k] * p.x[k * p.d + r];
  p.out[c * p.d + r] = o;
}

// Stores row r of group g, whose value v lane 0 holds (the whole warp calls it), and with
// jobs.post set the row's n_hc hc_post values, lane c forming value c (one round trip of loads,
// not n_hc^2 in a row on lane 0).
__device__ __forceinline__ void mv_put_warp(const MatvecJobs& jobs, const MatvecArgs& a, int g, int64_t r, float v,
                                            int lane) {
  if (lane == 0) a.y[g * a.y_stride + r] = v;
  const HcPostEpi& p = jobs.post;
  if (p.out == nullptr) return;  // uniform
  v = __shfl_sync(kFull, v, 0);
  if (lane < p.n_hc) mv_post_one(p, lane, r, v);
}

// When the streaming and row-slice matvecs let the next launch be scheduled (PDL), from
// DS4_CUDA_MATVEC_TRIGGER: right after their own PDL wait (default), =start at their start, or
// =exit as each block exits. A dependent scheduled early parks its blocks on the SMs (registers,
// shared memory) until its own wait returns, which holds off the side streams' launches: after
// the wait measured +1.2-2.0 % over the start, +1.0 % over the exit (perf-notes, tenth pass).
// 0 / 1 / 2: start / wait / exit (MatvecJobs::trigger).
int matvec_trigger_mode() {
  static const int mode = [] {
    const char* v = std::getenv("DS4_CUDA_MATVEC_TRIGGER");
    return v == nullptr ? 1 : std::strcmp(v, "start") == 0 ? 0 : std::strcmp(v, "exit") == 0 ? 2 : 1;
  }();
  return mode;
}
__device__ __forceinline__ void mv_trigger_start(const MatvecJobs& j) {
  if (j.trigger == 0) pdl_trigger();
}
__device__ __forceinline__ void mv_wait(const MatvecJobs& j) {
  pdl_wait();
  if (j.trigger == 1) pdl_trigger();
}

// Q8_0 dot of a staged region of nb blocks (split: payloads, then f16 scales) against a split
// activation (xq: 32 int8 per block, xd: f32 scales, both already at the region's first block),
// lane L taking half (L & 1) of block (L >> 1) of each step of 16 blocks: one 16-byte load of
// weights and one of activations per lane. The pair's integer dot, then s_b = (d_w * d_x) *
// isum_b added to accumulator b mod 8 in block order (lanes 0-15 hold the accumulators: block j,
// then j + 8) — quant::ref's order, as dot_chunk's 4-lanes-per-block mapping. Regions start on
// multiples of 16 blocks, so the accumulators carry across a row's regions.
__device__ float dot_q8_wide(const uint8_t* sm, int nb, const uint8_t* xq, const float* xd, int lane, float acc) {
  const int jl = lane >> 1, part = lane & 1;
  for (int j0 = 0; j0 < nb; j0 += 16) {  // uniform trip count: every lane shuffles
    const int j = j0 + jl;
    const bool on = j < nb;
    int isum = 0;
    if (on) {
      const int4 w = *reinterpret_cast<const int4*>(sm + j * 32 + 16 * part);
      const int4 x = *reinterpret_cast<const int4*>(xq + j * 32 + 16 * part);
      isum = __dp4a(w.x, x.x, isum);
      isum = __dp4a(w.y, x.y, isum);
      isum = __dp4a(w.z, x.z, isum);
      isum = __dp4a(w.w, x.w, isum);
    }
    isum += __shfl_xor_sync(kFull, isum, 1);
    const float v = on ? (h2f(ld16(sm + nb * 32 + 2 * j)) * xd[j]) * static_cast<float>(isum) : 0.0f;
    const float vhi = __shfl_down_sync(kFull, v, 16);
    if (lane < 16) {
      if (on) acc = acc + v;
      if (j + 8 < nb) acc = acc + vhi;
    }
  }
  return acc;
}

// dot_q8_wide's result on lane 0: accumulator s sits on lanes 2s, 2s+1; the reference's tree
// (s, s+4), (s, s+2), (0, 1).
__device__ float finish_q8_wide(float acc) {
  for (int off = 8; off >= 2; off >>= 1) acc = acc + __shfl_down_sync(kFull, acc, off);
  return acc;
}

// a.rpw rows per warp: with rpw > 1 (short rows, the whole row is one chunk) the warp stages
// its rows together, so more bytes are in flight per warp.
template <uint32_t T, bool kVec>
__global__ void __launch_bounds__(kMvWarps * 32, 4) matvec_chunked_kernel(MatvecJobs jobs) {
  pdl_wait();
  pdl_trigger();
  static_assert(ActFmt<T>::kSlice <= kActSliceMax, "activation slice exceeds its buffer");
  __shared__ __align__(16) uint8_t stage[kMvWarps][kMvChunk];
  __shared__ __align__(16) uint8_t xs[kActSliceMax];
  __shared__ Tables tab;
  const MatvecArgs a = blockIdx.z ? jobs.job[1] : jobs.job[0];
  if (static_cast<int64_t>(blockIdx.x) * kMvWarps * a.rpw >= a.n_rows) return;  // uniform: whole block
  if constexpr (T == kIQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tab.grid[i] = c_iq2_grid[i];
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kMvWarps + warp) * a.rpw;
  const int g = blockIdx.y;
  const int n_mine = static_cast<int>(a.n_rows - r0 < a.rpw ? (a.n_rows - r0 > 0 ? a.n_rows - r0 : 0) : a.rpw);
  if (a.ids && a.ids[g] < 0) {  // a group this device does not hold (expert parallelism): zeros
    if (lane == 0)
      for (int k = 0; k < n_mine; ++k) a.y[g * a.y_stride + r0 + k] = 0.0f;
    return;  // the whole block shares g, so no barrier below is left waiting
  }
  const bool active = n_mine > 0;  // idle warps still take part in the block's barriers
  const int64_t base = a.row0 + static_cast<int64_t>(a.ids ? a.ids[g] : g) * a.group_rows;
  const uint8_t* wrow = a.w + static_cast<size_t>(base + (active ? r0 : 0)) * a.row_bytes;
  const uint8_t* x = a.act + g * a.act_stride;
  uint8_t* sm = stage[warp];

  constexpr int CB = Chunk<T>::kBlocks;
  constexpr int kAct = ActFmt<T>::kBytes;
  const int64_t nblk = a.cols / Fmt<T>::kVals;
  float acc = 0.0f;
  for (int64_t c0 = 0; c0 < nblk; c0 += CB) {  // one chunk when rpw > 1
    const int nb = static_cast<int>(nblk - c0 < CB ? nblk - c0 : CB);
    // This chunk's activation slice, shared by the block's rows (4-byte words: every
    // activation block size is a multiple of 4 and every slice starts 4-byte aligned).
    {
      // Asynchronous copies: a load-store loop would wait one L2 round trip per iteration
      // (in-order issue), up to 14 of them per chunk.
      const int n4 = nb * kAct / 4;
      const auto* x4 = reinterpret_cast<const int*>(x + c0 * kAct);
      for (int i = threadIdx.x; i < n4; i += blockDim.x) cp_async4(reinterpret_cast<int*>(xs) + i, x4 + i);
    }
    if (active) {
      if (a.rpw == 1) stage_chunk<T, kVec>(wrow, nblk, c0, nb, sm, lane);
      else stage_rows<kVec>(wrow, a.row_bytes, n_mine, sm, lane);
    }
    cp_async_wait();
    __syncthreads();
    if (active) {
      if (a.rpw == 1) {
        acc = dot_chunk<T>(sm, xs, nb, lane, tab, acc);
      } else {
        for (int k = 0; k < n_mine; ++k) {
          const float v = dot_finish<T>(dot_chunk<T>(sm + k * staged_row_stride(a.row_bytes), xs, nb, lane, tab, 0.0f));
          mv_put_warp(jobs, a, g, r0 + k, v, lane);
        }
      }
    }
    __syncthreads();
  }
  if (!active || a.rpw != 1) return;
  const float out = dot_finish<T>(acc);
  mv_put_warp(jobs, a, g, r0, out, lane);
}

// ---- the streaming matvec (activations resident in shared memory) ---------------------------
//
// When a job's whole activation row fits kActResident bytes (every projection of the Flash and
// Pro shapes except the plain-path HC matvec) the block loads it once, and each warp then streams
// its rows on its own: a persistent loop over row slots (one wave of blocks, slot = rpw rows),
// each slot cut into chunks of Stream<T>::kBlocks weight blocks, double-buffered with cp.async so
// the next chunk (also across slots) is in flight while the current one is summed. No block
// barrier inside the loop. The dots are dot_chunk/dot_finish as above (chunks start on multiples
// of 16 blocks), so the results are the chunked kernel's bit for bit.

constexpr int kStreamBuf = 2304;      // bytes per pipeline buffer: 16 Q4_K blocks
constexpr int kActResident = 16384;   // activation bytes a block keeps resident

template <uint32_t T>
struct Stream {
  static constexpr int kFit = (kStreamBuf / Fmt<T>::kBytes) / 16 * 16;
  static constexpr int kBlocks = kFit > 16 ? kFit : 16;
  static_assert(kBlocks * Fmt<T>::kBytes <= kStreamBuf, "a stream chunk exceeds its buffer");
};

constexpr size_t kStreamSmem = size_t{kMvWarps} * 2 * kStreamBuf + kActResident;

template <uint32_t T, bool kVec>
__global__ void __launch_bounds__(kMvWarps * 32, 4) matvec_stream_kernel(MatvecJobs jobs) {
  mv_trigger_start(jobs);
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ Tables tab;
  const MatvecArgs a = blockIdx.z ? jobs.job[1] : jobs.job[0];
  const int64_t n_slots = (a.n_rows + a.rpw - 1) / a.rpw;
  if (static_cast<int64_t>(blockIdx.x) * kMvWarps >= n_slots) return;  // uniform: whole block
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int g = blockIdx.y;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * kMvWarps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kMvWarps + warp;
  // Weights are constant: without expert ids (written by the router) the first chunk is fetched
  // while the previous kernel may still run (PDL); everything else waits for it.
  const bool early = a.ids == nullptr;
  if (!early) mv_wait(jobs);
  if (a.ids && a.ids[g] < 0) {  // a group this device does not hold (expert parallelism): zeros
    for (int64_t s = first; s < n_slots; s += warps_total)
      for (int64_t r = s * a.rpw + lane; r < a.n_rows && r < (s + 1) * a.rpw; r += 32)
        a.y[g * a.y_stride + r] = 0.0f;
    return;
  }
  constexpr int CB = Stream<T>::kBlocks;
  constexpr int kAct = ActFmt<T>::kBytes;
  uint8_t* xs = smem + size_t{kMvWarps} * 2 * kStreamBuf;
  uint8_t* buf = smem + static_cast<size_t>(warp) * 2 * kStreamBuf;
  const int64_t nblk = a.cols / Fmt<T>::kVals;
  const int64_t base = a.row0 + static_cast<int64_t>(a.ids ? a.ids[g] : g) * a.group_rows;
  const uint8_t* w0 = a.w + static_cast<size_t>(base) * a.row_bytes;
  // Unit u = chunk ch of this warp's slot s; cursors (s, ch) of the next unit to issue and to
  // sum, advanced one unit at a time (64-bit divisions per unit cost ~10 % in an earlier kernel).
  const int nch = a.rpw == 1 ? static_cast<int>((nblk + CB - 1) / CB) : 1;
  int64_t is = first, cs = first;
  int ich = 0, cch = 0, iu = 0;
  auto issue = [&] {  // every lane commits one group per unit, empty or not
    if (is < n_slots) {
      uint8_t* dst = buf + (iu & 1) * kStreamBuf;
      const int64_t s = is;
      if (a.rpw == 1) {
        const int64_t c0 = static_cast<int64_t>(ich) * CB;
        const int nb = static_cast<int>(nblk - c0 < CB ? nblk - c0 : CB);
        stage_chunk<T, kVec>(w0 + static_cast<size_t>(s) * a.row_bytes, nblk, c0, nb, dst, lane);
      } else {
        const int64_t r0 = s * a.rpw;
        const int n_mine = static_cast<int>(a.n_rows - r0 < a.rpw ? a.n_rows - r0 : a.rpw);
        stage_rows<kVec>(w0 + static_cast<size_t>(r0) * a.row_bytes, a.row_bytes, n_mine, dst, lane);
      }
    }
    cp_async_commit();
    ++iu;
    if (++ich == nch) {
      ich = 0;
      is += warps_total;
    }
  };
  if (early) {
    issue();
    mv_wait(jobs);
  }
  if constexpr (T == kIQ2_XXS)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tab.grid[i] = c_iq2_grid[i];
  const bool wide = T == kQ8_0 && jobs.q8_wide;
  const uint8_t* xq = xs;                                     // wide: int8 values,
  const float* xd = reinterpret_cast<const float*>(xs + nblk * 32);  // then the f32 scales
  {  // the whole activation row, 4-byte words (wide: split, word w of block b its scale (w == 0)
     // or values 4(w-1)..)
    const int n4 = static_cast<int>(nblk * kAct / 4);
    const auto* x4 = reinterpret_cast<const int*>(a.act + g * a.act_stride);
    if (wide) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const int b = i / 9, w = i % 9;
        void* dst = w == 0 ? static_cast<void*>(xs + nblk * 32 + 4 * b) : static_cast<void*>(xs + b * 32 + 4 * (w - 1));
        cp_async4(dst, x4 + i);
      }
    } else {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) cp_async4(reinterpret_cast<int*>(xs) + i, x4 + i);
    }
    cp_async_commit();
  }
  if (!early) issue();
  cp_async_wait_group<0>();  // the activation and the first chunk have landed
  __syncthreads();
  float acc = 0.0f;
  for (int u = 0; cs < n_slots; ++u) {
    issue();  // unit u + 1 into the other buffer, consumed at u - 1 (the __syncwarp below)
    cp_async_wait_group<1>();
    __syncwarp();
    const uint8_t* sm = buf + (u & 1) * kStreamBuf;
    const int64_t s = cs;
    const int ch = cch;
    if (++cch == nch) {
      cch = 0;
      cs += warps_total;
    }
    if (a.rpw == 1) {
      const int64_t c0 = static_cast<int64_t>(ch) * CB;
      const int nb = static_cast<int>(nblk - c0 < CB ? nblk - c0 : CB);
      acc = wide ? dot_q8_wide(sm, nb, xq + c0 * 32, xd + c0, lane, acc)
                 : dot_chunk<T>(sm, xs + c0 * kAct, nb, lane, tab, acc);
      if (ch == nch - 1) {
        const float out = wide ? finish_q8_wide(acc) : dot_finish<T>(acc);
        mv_put_warp(jobs, a, g, s, out, lane);
        acc = 0.0f;
      }
    } else {
      const int64_t r0 = s * a.rpw;
      const int n_mine = static_cast<int>(a.n_rows - r0 < a.rpw ? a.n_rows - r0 : a.rpw);
      for (int k = 0; k < n_mine; ++k) {
        const uint8_t* row = sm + k * staged_row_stride(a.row_bytes);
        const float v = wide ? finish_q8_wide(dot_q8_wide(row, static_cast<int>(nblk), xq, xd, lane, 0.0f))
                             : dot_finish<T>(dot_chunk<T>(row, xs, static_cast<int>(nblk), lane, tab, 0.0f));
        mv_put_warp(jobs, a, g, r0 + k, v, lane);
      }
    }
    __syncwarp();
  }
  cp_async_wait_group<0>();
}

constexpr int64_t kQ8WideMinBytes = int64_t{24} << 20;  // see launch_matvec

// DS4_CUDA_Q8_WIDE=0: the streaming kernel's Q8_0 dot in dot_chunk's 4-lanes-per-block mapping.
bool q8_wide_off() {
  static const bool off = env_is_zero("DS4_CUDA_Q8_WIDE");
  return off;
}

// ---- the row-slice K-quant matvec (Q2_K, Q4_K and IQ2_XXS decode) --------------------------
//
// The routed experts of the q2 / q4 recipes. The streaming kernel (and the direct IQ2_XXS kernel
// this one replaced) spread each block over 8 lanes and reduce every block's integer dot and f32
// value by shuffles: ~150 of the ~245 instructions per lane and 32-value group were those
// reductions (PTX count, perf-notes session 9). Here kL lanes share a row (lane = kL * row + s):
// at step j lane s loads its slice of the row's block j (256 / kL values: IQ2_XXS the split
// payload's groups and the f16 scale, Q2_K / Q4_K the scale bytes and the codes they need, each
// load as wide as its alignment allows), forms the exact integer dots of its slice, log2(kL)
// xor-shuffles complete the block's sums on the row's lanes, and every lane of the row adds the
// block's f32 value to the row's running sum in block order: quant::ref's order and
// k_block_value's float steps, so results equal the other kernels' bit for bit. Loads run
// RsFmt::kAhead blocks ahead of the arithmetic. Each block of threads stages its group's
// activation once: the 256 values of a Q8_K block as kL segments padded by 16 bytes (the row's
// lanes read different banks), then the bsums, then the scales. IQ2_XXS signs are expanded to
// byte masks by arithmetic (no table: the grid lookups already load the shared-memory pipe).

constexpr int kRsWarps = 8;
constexpr int kRsMaxSmem = 48 * 1024;  // staged activation limit (else the other kernels)
// Copies of the IQ2_XXS grid in shared memory, entry e of copy c at e * 16 + c: lane l reads copy
// l mod 16, so the 16 lanes of a half-warp's 8-byte lookups never share a bank pair (one table:
// ~3-way conflicts).
constexpr int kRsGridCopies = 16;

template <int kL> struct RsLanes {
  static_assert(kL == 4 || kL == 8, "4 or 8 lanes per row");
  static constexpr int kRows = 32 / kL;           // rows per warp
  static constexpr int kG = 8 / kL;               // 32-value groups per lane and block
  static constexpr int kSeg = 256 / kL + 16;      // staged bytes per lane slice of a Q8_K block
  static constexpr int kValBytes = kL * kSeg;     // staged value bytes per Q8_K block
};

// A lane's slice of one weight block (kG groups of 32 values), as loaded into registers.
template <uint32_t T, int kG> struct RsSlice;
template <int kG> struct RsSlice<kIQ2_XXS, kG> {  // per group: grid indices, signs | scale << 28
  uint32_t q[2 * kG];
  uint32_t d;  // f16 scale
};
template <int kG> struct RsSlice<kQ2_K, kG> {  // scale bytes of the slice; codes; d | dmin << 16
  uint32_t sc;
  uint32_t qs[8];
  uint32_t dd;
};
template <int kG> struct RsSlice<kQ4_K, kG> {  // d, dmin and the 12 scale bytes; codes
  uint4 head;
  uint32_t qs[8];
};

template <uint32_t T> struct RsFmt {
  // Blocks in flight ahead of the arithmetic (Q2_K: 4, so the unrolled step knows j mod 4, hence
  // each load's alignment: the 84-byte blocks are 16-byte aligned every 4 blocks).
  static constexpr int kAhead = T == kQ4_K ? 2 : 4;
  static constexpr bool kBsums = T != kIQ2_XXS;
  static constexpr int kActWords = kBsums ? 73 : 65;  // staged words of a Q8_K block
};

// Loads words [kM, kN) from p (4-byte aligned, p mod 16 == kAlign) into w, each load as wide as
// its address allows.
template <int kAlign, int kN, int kM = 0>
__device__ __forceinline__ void rs_ld_words(const uint8_t* p, uint32_t* w) {
  if constexpr (kM < kN) {
    constexpr int al = (kAlign + 4 * kM) % 16;
    if constexpr (al == 0 && kM + 4 <= kN) {
      const uint4 v = ldg_weight(reinterpret_cast<const uint4*>(p + 4 * kM));
      w[kM] = v.x, w[kM + 1] = v.y, w[kM + 2] = v.z, w[kM + 3] = v.w;
      rs_ld_words<kAlign, kN, kM + 4>(p, w);
    } else if constexpr (al % 8 == 0 && kM + 2 <= kN) {
      const uint2 v = ldg_weight(reinterpret_cast<const uint2*>(p + 4 * kM));
      w[kM] = v.x, w[kM + 1] = v.y;
      rs_ld_words<kAlign, kN, kM + 2>(p, w);
    } else {
      w[kM] = ldg_weight(reinterpret_cast<const uint32_t*>(p + 4 * kM));
      rs_ld_words<kAlign, kN, kM + 1>(p, w);
    }
  }
}

// Loads slice s (groups kG * s ..) of block j of `row` (device layout; rows 16-byte aligned).
// kJ4 = j mod 4, a constant: where Q2_K's codes sit against 16-byte boundaries.
template <uint32_t T, int kG, int kJ4>
__device__ __forceinline__ void rs_load(const uint8_t* row, int nblk, int j, int s, RsSlice<T, kG>& w) {
  if constexpr (T == kIQ2_XXS) {
    constexpr int B = Split<kIQ2_XXS>::kBulk;
    // kG = 1: 8 bytes at a multiple of 8 (the loader's 16-byte case needs 4 words, so its
    // alignment argument only has to be right modulo 8); kG = 2: 16 bytes at a multiple of 16.
    rs_ld_words<0, 2 * kG>(row + j * B + 8 * kG * s, w.q);
    w.d = ldg_weight(reinterpret_cast<const unsigned short*>(row + nblk * B) + j);
  } else if constexpr (T == kQ2_K) {
    const uint8_t* b = row + j * Fmt<kQ2_K>::kBytes;  // 4 * kJ4 bytes past a 16-byte boundary
    w.sc = ldg_weight(reinterpret_cast<const uint32_t*>(b) + kG * s / 2);  // scale bytes 2 kG s ..
    rs_ld_words<(4 * kJ4) % 16, 8>(b + 16 + 32 * (kG * s / 4), w.qs);  // the codes' 32-byte half
    w.dd = ldg_weight(reinterpret_cast<const uint32_t*>(b) + 20);
  } else {
    const uint8_t* b = row + j * Fmt<kQ4_K>::kBytes;  // 144-byte blocks: 16-byte aligned
    w.head = ldg_weight(reinterpret_cast<const uint4*>(b));
    rs_ld_words<0, 8>(b + 16 + 32 * (kG * s / 2), w.qs);  // codes of sub-blocks 2 (kG s / 2) ..
  }
}

// Byte mask of 4 sign bits: byte i of the result is 0xff when bit 8i + 7 of t is set, else 0
// (prmt's sign-replicating byte select).
__device__ __forceinline__ uint32_t rs_sign_bytes(uint32_t t) {
  uint32_t m;
  asm("prmt.b32 %0, %1, 0, 0xba98;" : "=r"(m) : "r"(t));
  return m;
}

// The 8 sign bytes of IQ2_XXS sign index s7 (0..127): byte i is 0xff when value i is negated
// (bit i of s7; the 8th: the parity of s7, ksigns_iq2xs). 0x10204080 moves bit i of a nibble to
// bit 8i + 7 with no overlapping terms.
__device__ __forceinline__ uint64_t rs_sign_mask(uint32_t s7) {
  const uint32_t lo = rs_sign_bytes(s7 * 0x10204080u);
  const uint32_t hi = rs_sign_bytes((s7 >> 4) * 0x10204080u + (static_cast<uint32_t>(__popc(s7)) << 31));
  return static_cast<uint64_t>(hi) << 32 | lo;
}

__device__ __forceinline__ int rs_bsum(uint32_t pair, int hi) {  // int16 half of a bsums word
  return hi ? static_cast<int>(pair) >> 16 : static_cast<int>(static_cast<int16_t>(pair & 0xffff));
}

// The integer sums of lane slice s against its activation values xq (32 kG values, 16-byte
// aligned) and their 2 kG bsums (bs): isum the scaled code dot, summs the min correction
// (K-quants). grid: this lane's copy of the IQ2_XXS grid (entry e at grid[e * kRsGridCopies]);
// with kSt, signs: this lane's copy of the IQ2_XXS sign masks (rs_sign_mask of s at
// signs[s * kRsGridCopies]) in place of computing them.
template <uint32_t T, int kG, bool kSt = false>
__device__ __forceinline__ void rs_dots(const RsSlice<T, kG>& w, const uint8_t* xq, const uint8_t* bs, int s,
                                        const uint64_t* grid, const uint64_t* signs, int& isum, int& summs) {
  isum = summs = 0;
  int bsum[2 * kG];
  if constexpr (T != kIQ2_XXS) {
    if constexpr (kG == 2) {
      const uint2 b2 = *reinterpret_cast<const uint2*>(bs);
      bsum[0] = rs_bsum(b2.x, 0), bsum[1] = rs_bsum(b2.x, 1), bsum[2] = rs_bsum(b2.y, 0), bsum[3] = rs_bsum(b2.y, 1);
    } else {
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(bs);
      bsum[0] = rs_bsum(b1, 0), bsum[1] = rs_bsum(b1, 1);
    }
  }
#pragma unroll
  for (int gi = 0; gi < kG; ++gi) {  // group (32 values) kG * s + gi of the block
    const int4 y0 = *reinterpret_cast<const int4*>(xq + 32 * gi);
    const int4 y1 = *reinterpret_cast<const int4*>(xq + 32 * gi + 16);
    const int ys[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
    const int P = kG * s + gi;
    if constexpr (T == kIQ2_XXS) {
      // Signed grid values s_i * g_i (g_i in 8..43): g ^ M per byte is -g - 1 where the sign mask
      // byte M is 0xff (-1), so sum s_i g_i y_i = dp4a(g ^ M, y) - dp4a(M, y), exactly (M:
      // rs_sign_mask).
      const uint32_t a0 = w.q[2 * gi], a1 = w.q[2 * gi + 1];
      int sp[2] = {0, 0}, sn[2] = {0, 0};  // per half of 8 values: two dp4a chains each
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint64_t g = grid[((a0 >> (8 * e)) & 0xff) * kRsGridCopies];
        const uint32_t s7 = (a1 >> (7 * e)) & 127;
        uint64_t m;
        if constexpr (kSt) m = signs[s7 * kRsGridCopies];
        else m = rs_sign_mask(s7);
        const uint32_t mlo = static_cast<uint32_t>(m), mhi = static_cast<uint32_t>(m >> 32);
        sp[0] = __dp4a(static_cast<int>(static_cast<uint32_t>(g) ^ mlo), ys[2 * e], sp[0]);
        sn[0] = __dp4a(static_cast<int>(mlo), ys[2 * e], sn[0]);
        sp[1] = __dp4a(static_cast<int>(static_cast<uint32_t>(g >> 32) ^ mhi), ys[2 * e + 1], sp[1]);
        sn[1] = __dp4a(static_cast<int>(mhi), ys[2 * e + 1], sn[1]);
      }
      isum += ((sp[0] + sp[1]) - (sn[0] + sn[1])) * static_cast<int>(2 * (a1 >> 28) + 1);
    } else if constexpr (T == kQ2_K) {  // k_part's Q2_K: two 16-value sub-blocks of part P
      const int shift = 2 * (P % 4);
      int sub0 = 0, sub1 = 0;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        sub0 = __dp4a((static_cast<int>(w.qs[m]) >> shift) & 0x03030303, ys[m], sub0);
        sub1 = __dp4a((static_cast<int>(w.qs[4 + m]) >> shift) & 0x03030303, ys[4 + m], sub1);
      }
      const uint32_t sc2 = w.sc >> (8 * ((2 * P) % 4));  // scale bytes 2P, 2P + 1
      const int s0 = sc2 & 0xff, s1 = (sc2 >> 8) & 0xff;
      isum += (s0 & 15) * sub0 + (s1 & 15) * sub1;
      summs += bsum[2 * gi] * (s0 >> 4) + bsum[2 * gi + 1] * (s1 >> 4);
    } else {  // k_part's Q4_K: sub-block P of 32 values, 6-bit scale and min
      auto sbyte = [&](int b) {  // scale byte b (run-time b: selects, not an indexed array)
        const uint32_t word = b < 4 ? w.head.y : b < 8 ? w.head.z : w.head.w;
        return static_cast<int>((word >> (8 * (b & 3))) & 0xff);
      };
      int sc, mn;
      if (P < 4) {
        sc = sbyte(P) & 63;
        mn = sbyte(P + 4) & 63;
      } else {
        sc = (sbyte(P + 4) & 15) | ((sbyte(P - 4) >> 6) << 4);
        mn = (sbyte(P + 4) >> 4) | ((sbyte(P) >> 6) << 4);
      }
      int sub = 0;
#pragma unroll
      for (int m = 0; m < 8; ++m) sub = __dp4a((static_cast<int>(w.qs[m]) >> (4 * (P & 1))) & 0x0f0f0f0f, ys[m], sub);
      isum += sc * sub;
      summs += mn * (bsum[2 * gi] + bsum[2 * gi + 1]);
    }
  }
}

// The block's f32 value from its completed integer sums (k_block_value's steps).
template <uint32_t T, int kG>
__device__ __forceinline__ float rs_value(const RsSlice<T, kG>& w, float yd, int isum, int summs) {
  if constexpr (T == kIQ2_XXS) {
    const float d = h2f(static_cast<uint16_t>(w.d)) * yd;
    return d * static_cast<float>(isum);
  } else {
    uint32_t dd;
    if constexpr (T == kQ2_K) dd = w.dd;
    else dd = w.head.x;
    const float dall = yd * h2f(static_cast<uint16_t>(dd & 0xffff));
    const float dmin = yd * h2f(static_cast<uint16_t>(dd >> 16));
    return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
}

// f(std::integral_constant<int, K>{}) for K = 0 .. N-1, in order (unrolled, K a constant).
template <class F, int... K>
__device__ __forceinline__ void rs_static_for_seq(F& f, std::integer_sequence<int, K...>) {
  (f(std::integral_constant<int, K>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void rs_static_for(F&& f) {
  rs_static_for_seq(f, std::make_integer_sequence<int, N>{});
}

// Shared memory of the staged activation for nblk Q8_K blocks.
template <uint32_t T, int kL>
size_t rs_smem_bytes(int64_t nblk) {
  return static_cast<size_t>(nblk) * (RsLanes<kL>::kValBytes + (RsFmt<T>::kBsums ? 32 : 0) + 4);
}

// Blocks per SM the row-slice kernel is compiled for (a register cap: ptxas's own choice moved
// by up to 17 registers with unrelated code changes, and Q2_K at 92 fit 2 blocks, not 3): the
// occupancy each variant had as first measured (perf-notes session 11; IQ2_XXS two rows: 3).
constexpr int rs_min_blocks(uint32_t T, int kL, int kR) {
  return T == kIQ2_XXS ? (kR == 2 ? (kL == 8 ? 3 : 2) : kL == 8 ? 5 : 4) : kR == 2 ? 1 : 3;
}

// Block x of job z, group y: rows r0 + k kRows + (warp's rows) for k < kR (kR rows per lane
// slice, kRows = the block's row slots), each row's blocks loaded kAhead ahead and summed as for
// kR = 1 (the same value per row); the kR rows of a lane share every activation load.
// kSt (IQ2_XXS): the sign masks from a table in shared memory (iq2_sign_table).
template <uint32_t T, int kL, int kR, bool kSt = false>
__global__ void __launch_bounds__(kRsWarps * 32, rs_min_blocks(T, kL, kR)) matvec_rowslice_kernel(MatvecJobs jobs) {
  mv_trigger_start(jobs);
  extern __shared__ __align__(16) uint8_t rsm[];
  __shared__ uint64_t grid[T == kIQ2_XXS ? 256 * kRsGridCopies : 1];
  __shared__ uint64_t signs[kSt ? 128 * kRsGridCopies : 1];
  using Ln = RsLanes<kL>;
  constexpr int kRows = kRsWarps * Ln::kRows, kG = Ln::kG;
  constexpr int kAhead = RsFmt<T>::kAhead;
  const MatvecArgs a = blockIdx.z ? jobs.job[1] : jobs.job[0];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows * kR;
  if (r0 >= a.n_rows) return;  // uniform: the other job of a pair has more rows
  const int lane = threadIdx.x & 31, s = lane % kL;
  const int64_t rl = r0 + (threadIdx.x / 32) * Ln::kRows + lane / kL;  // row k: rl + k * kRows
  const int g = blockIdx.y;
  const int nblk = static_cast<int>(a.cols / 256);
  bool on[kR];
#pragma unroll
  for (int k = 0; k < kR; ++k) on[k] = rl + k * kRows < a.n_rows;
  if constexpr (T == kIQ2_XXS) {  // constant: before the wait; one load per entry, then its copies
    static_assert(kRsWarps * 32 >= 256, "a thread per grid entry");
    if (threadIdx.x < 256) {
      const uint64_t e = c_iq2_grid[threadIdx.x];
#pragma unroll
      for (int c = 0; c < kRsGridCopies; ++c) grid[threadIdx.x * kRsGridCopies + c] = e;
    }
    if (kSt && threadIdx.x < 128) {
      const uint64_t m = rs_sign_mask(threadIdx.x);
#pragma unroll
      for (int c = 0; c < kRsGridCopies; ++c) signs[threadIdx.x * kRsGridCopies + c] = m;
    }
  }
  // Weights are constant: fetched before the PDL wait, also those of listed groups when the
  // ids are known complete by then (read past L1: written by an earlier launch).
  const bool early = a.ids == nullptr || a.ids_early;
  if (!early) mv_wait(jobs);
  const int id = a.ids == nullptr ? g : early ? __ldcg(a.ids + g) : a.ids[g];
  if (id < 0) {  // a group this device does not hold (expert parallelism): zeros
    if (early) mv_wait(jobs);  // y may still be read by the launches before
#pragma unroll
    for (int k = 0; k < kR; ++k)
      if (on[k] && s == 0) a.y[g * a.y_stride + rl + k * kRows] = 0.0f;
    return;
  }
  const int64_t base = a.row0 + static_cast<int64_t>(id) * a.group_rows;
  const uint8_t* row[kR];
#pragma unroll
  for (int k = 0; k < kR; ++k) row[k] = a.w + static_cast<size_t>(base + (on[k] ? rl + k * kRows : 0)) * a.row_bytes;
  static_assert(T != kQ2_K || kAhead % 4 == 0, "Q2_K steps need j mod 4 as a constant");
  RsSlice<T, kG> buf[kAhead][kR];
  rs_static_for<kAhead>([&](auto kc) {
    constexpr int K = decltype(kc)::value;
#pragma unroll
    for (int k = 0; k < kR; ++k) {
      buf[K][k] = RsSlice<T, kG>{};
      if (on[k] && K < nblk) rs_load<T, kG, K % 4>(row[k], nblk, K, s, buf[K][k]);
    }
  });
  if (early) mv_wait(jobs);
  uint8_t* xq = rsm;                              // nblk x kL segments of 256 / kL values
  uint8_t* xb = rsm + nblk * Ln::kValBytes;       // nblk x 16 bsums (K-quants), 16-byte aligned
  float* xd = reinterpret_cast<float*>(xb + (RsFmt<T>::kBsums ? nblk * 32 : 0));  // nblk scales
  {  // word w of Q8_K block b: its scale (0), values 4 (w - 1).. (1..64), bsums (65..72)
    constexpr int kWords = RsFmt<T>::kActWords, kSrcWords = sizeof(BQ8_K) / 4, kSegWords = 64 / kL;
    const auto* x4 = reinterpret_cast<const int*>(a.act + g * a.act_stride);
    for (int i = threadIdx.x; i < nblk * kWords; i += blockDim.x) {
      const int b = i / kWords, w = i % kWords;
      void* dst;
      if (w == 0) dst = xd + b;
      else if (w <= 64) dst = xq + b * Ln::kValBytes + ((w - 1) / kSegWords) * Ln::kSeg + 4 * ((w - 1) % kSegWords);
      else dst = xb + b * 32 + 4 * (w - 65);
      cp_async4(dst, x4 + b * kSrcWords + w);
    }
  }
  cp_async_wait();
  __syncthreads();
  float acc[kR];
#pragma unroll
  for (int k = 0; k < kR; ++k) acc[k] = 0.0f;
  const uint64_t* my_grid = grid + (lane % kRsGridCopies);
  const uint64_t* my_signs = signs + (kSt ? lane % kRsGridCopies : 0);
  for (int j0 = 0; j0 < nblk; j0 += kAhead) {
    rs_static_for<kAhead>([&](auto kc) {  // step j = j0 + K (j0 a multiple of kAhead)
      constexpr int K = decltype(kc)::value;
      const int j = j0 + K;
      if (j >= nblk) return;  // uniform across the block
      RsSlice<T, kG> cur[kR];
#pragma unroll
      for (int k = 0; k < kR; ++k) {
        cur[k] = buf[K][k];
        if (on[k] && j + kAhead < nblk) rs_load<T, kG, K % 4>(row[k], nblk, j + kAhead, s, buf[K][k]);
      }
      int isum[kR], summs[kR];
#pragma unroll
      for (int k = 0; k < kR; ++k)  // the same activation loads for each row (no store between)
        rs_dots<T, kG, kSt>(cur[k], xq + j * Ln::kValBytes + s * Ln::kSeg, xb + j * 32 + 4 * kG * s, s, my_grid,
                            my_signs, isum[k], summs[k]);
#pragma unroll
      for (int k = 0; k < kR; ++k) {
#pragma unroll
        for (int off = 1; off < kL; off <<= 1) {
          isum[k] += __shfl_xor_sync(kFull, isum[k], off);
          if constexpr (RsFmt<T>::kBsums) summs[k] += __shfl_xor_sync(kFull, summs[k], off);
        }
        acc[k] = acc[k] + rs_value<T, kG>(cur[k], xd[j], isum[k], summs[k]);
      }
    });
  }
#pragma unroll
  for (int k = 0; k < kR; ++k)
    if (on[k] && s == 0) a.y[g * a.y_stride + rl + k * kRows] = T == kIQ2_XXS ? 0.125f * acc[k] : acc[k];
}

// Lanes per row of format T: DS4_CUDA_MATVEC_ROWSLICE=4 / =8 for every format, =0 for none (the
// K-quant / IQ2_XXS decode matvecs through the streaming kernel: comparisons); by
// default 8 for IQ2_XXS, 4 for the K-quants (H200, perf-notes session 11).
template <uint32_t T>
int rowslice_lanes() {
  static const int env = [] {
    const char* v = std::getenv("DS4_CUDA_MATVEC_ROWSLICE");
    return v == nullptr ? -1 : v[0] == '0' ? 0 : v[0] == '4' ? 4 : v[0] == '8' ? 8 : -1;
  }();
  return env >= 0 ? env : T == kIQ2_XXS ? 8 : 4;
}

// Rows per lane slice of format T: DS4_CUDA_ROWSLICE_ROWS=1 / =2 for every format; by default 2
// for IQ2_XXS (the gate/up pair of 6 experts in one wave: 384 blocks, not 768 at 5 per SM), 1
// for the K-quants (register-bound: Q2_K's 75 registers would leave 2 blocks per SM).
template <uint32_t T>
int rowslice_rows() {
  static const int env = [] {
    const char* v = std::getenv("DS4_CUDA_ROWSLICE_ROWS");
    return v == nullptr ? -1 : v[0] == '1' ? 1 : v[0] == '2' ? 2 : -1;
  }();
  return env >= 0 ? env : T == kIQ2_XXS ? 2 : 1;
}

// The IQ2_XXS row-slice kernel (8 lanes, two rows: the decode default) looks its sign masks up
// in shared memory (16 copies, as the grid) instead of computing them: fewer integer
// instructions per 4 values for one more shared-memory load, and the table's fill runs before
// the PDL wait (H100, perf-notes session 28: decode +0.6-1.0 %, though the launch alone, with
// its fill exposed, is 7 % slower). DS4_CUDA_IQ2_SIGN_TABLE=0: computed; read once.
bool iq2_sign_table() {
  static const bool on = !env_is_zero("DS4_CUDA_IQ2_SIGN_TABLE");
  return on;
}

// Static shared memory of matvec_rowslice_kernel<T, .., kSt>: the IQ2_XXS grid copies (32 KiB)
// and, with the sign table, its masks' (16 KiB); else 8-byte words.
constexpr size_t rs_static_smem(uint32_t T, bool sign_table) {
  return sizeof(uint64_t) * ((T == kIQ2_XXS ? 256 * kRsGridCopies : 1) + (sign_table ? 128 * kRsGridCopies : 1));
}

// matvec_rowslice_kernel<T, kL, kR, kSt> over `rows` rows per job and group; smem:
// rs_smem_bytes<T, kL>.
template <uint32_t T, int kL, int kR, bool kSt = false>
void launch_rowslice_as(const MatvecJobs& jobs, int64_t rows, size_t smem, int n_jobs, int groups) {
  const int64_t per_block = int64_t{kRsWarps} * 32 / kL * kR;
  const dim3 grid(static_cast<unsigned>((rows + per_block - 1) / per_block), static_cast<unsigned>(groups),
                  static_cast<unsigned>(n_jobs));
  auto kernel = matvec_rowslice_kernel<T, kL, kR, kSt>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem, rs_static_smem(T, kSt));
  launch_k(kernel, grid, kRsWarps * 32, smem, jobs);
}

// Launches matvec_rowslice_kernel when the format has one and the rows and activation suit it
// (16-byte aligned rows, the staged activation within kRsMaxSmem and, with the static tables,
// within smem_limit); false otherwise.
template <uint32_t T>
bool launch_rowslice(const MatvecJobs& jobs, int n_jobs, int groups) {
  if constexpr (T != kQ2_K && T != kQ4_K && T != kIQ2_XXS) {
    return false;
  } else {
    const int lanes = rowslice_lanes<T>();
    // No hc_post epilogue here (the K-quant kernels sit at their register caps): the streaming kernel takes it.
    if (lanes == 0 || jobs.post.out != nullptr) return false;
    int64_t rows = 0, nblk = 0;
    for (int j = 0; j < n_jobs; ++j) {
      const MatvecArgs& a = jobs.job[j];
      if (reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || a.row_bytes % 16 != 0 || a.act_stride % 4 != 0) return false;
      rows = std::max(rows, a.n_rows);
      nblk = std::max(nblk, a.cols / 256);
    }
    const size_t smem = lanes == 4 ? rs_smem_bytes<T, 4>(nblk) : rs_smem_bytes<T, 8>(nblk);
    // With the largest static tables this format's kernels take (the sign table: IQ2_XXS only).
    if (smem > kRsMaxSmem || smem + rs_static_smem(T, T == kIQ2_XXS) > smem_limit()) return false;
    const bool two = rowslice_rows<T>() == 2;
    if (lanes == 4) {
      two ? launch_rowslice_as<T, 4, 2>(jobs, rows, smem, n_jobs, groups)
          : launch_rowslice_as<T, 4, 1>(jobs, rows, smem, n_jobs, groups);
    } else {
      if (T == kIQ2_XXS && two && iq2_sign_table())
        launch_rowslice_as<T, 8, 2, T == kIQ2_XXS>(jobs, rows, smem, n_jobs, groups);
      else if (two) launch_rowslice_as<T, 8, 2>(jobs, rows, smem, n_jobs, groups);
      else launch_rowslice_as<T, 8, 1>(jobs, rows, smem, n_jobs, groups);
    }
    return true;
  }
}

template <uint32_t T>
void launch_matvec(MatvecJobs jobs, int n_jobs, int groups) {
  jobs.trigger = matvec_trigger_mode();
  const int64_t nblk_max = std::max(jobs.job[0].cols, n_jobs > 1 ? jobs.job[1].cols : 0) / Fmt<T>::kVals;
  const bool resident = nblk_max * ActFmt<T>::kBytes <= kActResident;
  const int64_t chunk_bytes = resident ? int64_t{Stream<T>::kBlocks} * Fmt<T>::kBytes
                                       : int64_t{Chunk<T>::kBlocks} * Fmt<T>::kBytes;
  int64_t blocks = 0;
  bool vec = true;
  for (int j = 0; j < n_jobs; ++j) {
    MatvecArgs& a = jobs.job[j];
    // Short rows: up to 4 per warp while they fit one chunk together.
    a.rpw = 1;
    while (a.rpw < 4 && static_cast<int64_t>(staged_row_stride(a.row_bytes)) * (a.rpw + 1) <= chunk_bytes) ++a.rpw;
    const int64_t per_block = static_cast<int64_t>(kMvWarps) * a.rpw;
    blocks = std::max(blocks, (a.n_rows + per_block - 1) / per_block);
    vec = vec && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.row_bytes % 16 == 0;
  }
  if (launch_rowslice<T>(jobs, n_jobs, groups)) return;
  // The 2-lanes-per-block Q8_0 dot wins on the big projections (q_b, o_a, o_b, output: -9 to -16 %
  // per matrix on the H200) and loses on the small ones (q_a, kv, shared expert: +6 to +24 %),
  // where the split activation staging is not amortised over enough rows.
  int64_t total_bytes = 0;
  for (int j = 0; j < n_jobs; ++j) total_bytes += jobs.job[j].n_rows * static_cast<int64_t>(jobs.job[j].row_bytes);
  if (jobs.job[0].group_rows > 0) total_bytes *= groups;  // groups read different rows (experts, o_a)
  jobs.q8_wide = !q8_wide_off() && total_bytes >= kQ8WideMinBytes;
  if (resident) {  // one wave: 4 blocks per SM over all groups and jobs
    const int64_t wave = std::max<int64_t>(1, int64_t{4} * sm_count() / (int64_t{groups} * n_jobs));
    blocks = std::min(blocks, wave);
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(groups), static_cast<unsigned>(n_jobs));
  if (resident) {
    auto k = vec ? matvec_stream_kernel<T, true> : matvec_stream_kernel<T, false>;
    allow_dynamic_smem(reinterpret_cast<const void*>(k), kStreamSmem);
    launch_k(k, grid, kMvWarps * 32, kStreamSmem, jobs);
  } else if (vec) {
    launch_k(matvec_chunked_kernel<T, true>, grid, kMvWarps * 32, 0, jobs);
  } else {
    launch_k(matvec_chunked_kernel<T, false>, grid, kMvWarps * 32, 0, jobs);
  }
}

// The activation format of weights of `type` (as quant::activation_type).
ActFormat act_of(uint32_t type) {
  switch (type) {
    case kF32: case kF16: case kBF16: return ActFormat::F32;
    case kQ8_0: case kMXFP4: return ActFormat::Q8_0;
    case kQ2_K: case kQ4_K: case kIQ2_XXS: return ActFormat::Q8_K;
    default: return ActFormat::Bad;
  }
}

}  // namespace

bool upload_quant_tables(const uint64_t* iq2_grid, const int8_t* mxfp4_doubled,
                         const float* mxfp4_half_scale) {
  return cudaMemcpyToSymbol(c_iq2_grid, iq2_grid, sizeof(c_iq2_grid)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_mx_doubled, mxfp4_doubled, sizeof(c_mx_doubled)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_mx_half, mxfp4_half_scale, sizeof(c_mx_half)) == cudaSuccess;
}

size_t act_row_bytes(uint32_t type, int64_t cols) {
  switch (act_of(type)) {
    case ActFormat::F32: return static_cast<size_t>(cols) * 4;
    case ActFormat::Q8_0: return static_cast<size_t>(cols / 32) * sizeof(BQ8_0Act);
    case ActFormat::Q8_K: return static_cast<size_t>(cols / 256) * sizeof(BQ8_K);
    default: return 0;
  }
}

namespace {

// Quantizes `rows` rows of `cols` values from `src` into activation blocks of format `at`
// (Q8_0 or Q8_K), rows `act_bytes` apart: 4 warps per launch block, each quantizing 256 values.
template <class Src>
void quantize_src(ActFormat at, Src src, int64_t cols, int rows, uint8_t* act, size_t act_bytes) {
  const int64_t warps = (at == ActFormat::Q8_0 ? (cols / 32 + 7) / 8 : cols / 256) * rows;
  const unsigned nblk = static_cast<unsigned>((warps + 3) / 4);
  if (at == ActFormat::Q8_0) launch_k(quant_q8_0_kernel<Src>, nblk, 128, 0, src, cols, rows, act, act_bytes);
  else launch_k(quant_q8_k_kernel<Src>, nblk, 128, 0, src, cols, rows, act, act_bytes);
}

// Quantizes the input of `op` into op.act (a no-op for float weights, whose dots read x) and
// returns the kernel arguments.
MatvecArgs prepare(const MatvecOp& op) {
  const DevMatrix& w = *op.w;
  const ActFormat at = act_of(w.type);
  const int q_rows = op.x_stride == 0 ? 1 : op.groups;
  const size_t ab = act_row_bytes(w.type, w.cols);
  MatvecArgs a{w.data, w.row_bytes, w.cols, op.n_rows, op.row0, op.group_rows, op.ids, nullptr,
               op.x_stride == 0 ? 0 : ab, op.y, op.y_stride, 1, op.ids_early && op.ids != nullptr};
  if (at == ActFormat::F32) {
    a.act = reinterpret_cast<const uint8_t*>(op.x);
    a.act_stride = static_cast<size_t>(op.x_stride) * 4;
    return a;
  }
  a.act = op.act;
  if (op.act_ready) return a;
  quantize_src(at, RowSrc{op.x, op.x_stride}, w.cols, q_rows, op.act, ab);
  return a;
}

void launch_jobs(uint32_t type, const MatvecJobs& jobs, int n_jobs, int groups) {
  switch (type) {
    case kF32: launch_matvec<kF32>(jobs, n_jobs, groups); break;
    case kF16: launch_matvec<kF16>(jobs, n_jobs, groups); break;
    case kBF16: launch_matvec<kBF16>(jobs, n_jobs, groups); break;
    case kQ8_0: launch_matvec<kQ8_0>(jobs, n_jobs, groups); break;
    case kMXFP4: launch_matvec<kMXFP4>(jobs, n_jobs, groups); break;
    case kQ2_K: launch_matvec<kQ2_K>(jobs, n_jobs, groups); break;
    case kQ4_K: launch_matvec<kQ4_K>(jobs, n_jobs, groups); break;
    case kIQ2_XXS: launch_matvec<kIQ2_XXS>(jobs, n_jobs, groups); break;
    default: break;  // rejected by the host side before upload
  }
}

// Whether swiglu_matvec's down projection fetches its experts' first weight blocks before its
// PDL wait (DS4_CUDA_IDS_EARLY=0: after it, as every other launch with expert ids).
bool ids_early_enabled() {
  static const bool on = !env_is_zero("DS4_CUDA_IDS_EARLY");
  return on;
}

// Whether op's hc_post (op.post) fits the matvec epilogue: one group whose rows are the
// post's d values, at most kMaxHcStreams streams.
bool post_in_epilogue(const MatvecOp& op) {
  return op.groups == 1 && op.row0 == 0 && op.n_rows == op.post->d && op.post->n_hc <= kMaxHcStreams;
}

// One matvec (nothing for an empty job), and op.post's hc_post in its epilogue or after it.
void run_single(const MatvecOp& op) {
  if (op.n_rows <= 0 || op.groups <= 0) return;
  MatvecJobs jobs{};
  jobs.job[0] = prepare(op);
  const bool epi = op.post != nullptr && post_in_epilogue(op);
  if (epi) jobs.post = *op.post;
  launch_jobs(op.w->type, jobs, 1, op.groups);
  if (op.post != nullptr && !epi) {
    const HcPostEpi& p = *op.post;
    hc_post(op.y, p.x, p.post, p.comb, p.n_hc, p.d, p.out);
  }
}

}  // namespace

void matvec(const DevMatrix& w, int64_t row0, int64_t n_rows, int64_t group_rows,
            const int32_t* ids, int groups, const float* x, int64_t x_stride, float* y,
            int64_t y_stride, uint8_t* act_scratch) {
  run_single(MatvecOp{&w, row0, n_rows, group_rows, ids, groups, x, x_stride, y, y_stride, act_scratch, false});
}

ActFormat act_format(uint32_t type) { return act_of(type); }

void matvec_op(const MatvecOp& op) { run_single(op); }

void swiglu_matvec(MatvecOp op, const float* gate, const float* up, float clamp, const float* gate_w,
                   float* mid) {
  const int64_t n = op.w->cols;
  op.x_stride = op.groups > 1 ? n : 0;
  const ActFormat at = act_of(op.w->type);
  if (at == ActFormat::F32 || at == ActFormat::Bad) {  // float weights read the f32 values
    swiglu(gate, up, op.groups, n, clamp, gate_w, mid);
    op.x = mid;
    run_single(op);
    return;
  }
  if (op.n_rows <= 0 || op.groups <= 0) return;
  // DS4_CUDA_SWIGLU_WIDE=0: the 8-values-per-lane quantization kernels instead of a value per thread.
  static const bool wide = !env_is_zero("DS4_CUDA_SWIGLU_WIDE");
  const SwigluSrc src{gate, up, n, clamp, gate_w};
  const size_t ab = act_row_bytes(op.w->type, n);
  if (wide && n % 256 == 0 && (at == ActFormat::Q8_0 || at == ActFormat::Q8_K))
    launch_k(swiglu_quant_kernel, static_cast<unsigned>(n / 256 * op.groups), 256, 0, src, n, at == ActFormat::Q8_K,
             op.act, ab);
  else
    quantize_src(at, src, n, op.groups, op.act, ab);
  op.act_ready = true;
  // The quantization just launched waits for its predecessors before it lets the matvec start,
  // so the ids, written before the launch that precedes it, are complete when the matvec
  // starts: its experts' first weight blocks load before its own wait (DS4_CUDA_IDS_EARLY=0: after).
  op.ids_early = op.ids != nullptr && ids_early_enabled();
  run_single(op);
}

void matvec_pair(const MatvecOp& a, const MatvecOp& b) {
  if (a.post != nullptr || b.post != nullptr) {  // the epilogue serves single launches only
    run_single(a);
    run_single(b);
    return;
  }
  // The same input in the same format is quantized once; different inputs need two buffers
  // (inputs quantized beforehand into one buffer are the same input).
  const bool shared = a.x == b.x && a.x_stride == b.x_stride && a.w->cols == b.w->cols && !b.act_ready;
  const bool both_ready = a.act_ready && b.act_ready;
  if (a.w->type != b.w->type || a.groups != b.groups ||
      (!shared && !both_ready && act_of(a.w->type) != ActFormat::F32 && a.act == b.act)) {
    run_single(a);
    run_single(b);
    return;
  }
  MatvecJobs jobs{};
  jobs.job[0] = prepare(a);
  MatvecOp bb = b;
  if (shared) {
    bb.act = a.act;
    bb.act_ready = true;
  }
  jobs.job[1] = prepare(bb);
  launch_jobs(a.w->type, jobs, 2, a.groups);
}

namespace {

// ---- the multi-token matvec ("matmat") -------------------------------------------------------
//
// Prefill reads each weight row once for many tokens. One warp per output row, kMmWarps rows per
// block, blockIdx.y the group (a weight group, or an expert in list mode). The warp stages its
// row chunk by chunk into shared memory (as matvec_kernel does) and, per chunk, runs dot_chunk
// for each of up to kMmTok tokens against that token's activation (read from global memory,
// cached in L1), keeping every token's per-lane running value in shared memory. Each token's
// value therefore goes through exactly matvec_kernel's per-lane operations in the same order:
// chunks are whole multiples of 16 blocks (the lane partitions of F32/F16/BF16 and Q8_0/MXFP4
// restart on the same lane at every chunk start; the K-quants sum blocks in order), and
// dot_finish is the same final tree. Results equal matvec (and quant::vec_dot) bit for bit.

// DS4_CUDA_MATMAT_LANE=0: the Q8_0/MXFP4 and float formats use matmat_kernel too (comparisons).
bool lane_matmat_off() {
  static const bool off = env_is_zero("DS4_CUDA_MATMAT_LANE");
  return off;
}

constexpr int kMmWarps = 8;
constexpr int kMmTok = 32;      // tokens per pass over the weights
constexpr int kMmStage = 2304;  // staging bytes per warp (>= every MmChunk's bytes)

template <uint32_t T>
struct MmChunk {
  static constexpr int kRaw = (2048 / Fmt<T>::kBytes) / 16 * 16;
  static constexpr int kBlocks = kRaw > 16 ? kRaw : 16;
  static_assert(kBlocks * Fmt<T>::kBytes <= kMmStage, "matmat chunk exceeds its staging buffer");
};

struct MatmatArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t cols, n_rows, row0, group_rows;
  int n_tok;
  const int32_t* cnt;
  const int32_t* list;
  int64_t list_stride;
  int64_t in_div, in_mul, in_gmul;
  const uint8_t* act;
  size_t act_stride;  // bytes between input rows (quantized rows, or f32 rows for float weights)
  float* y;
  int64_t y_stride, y_gstride;
  // Expert classes (the predecode kernel, expert lists only): with cls_hi > cls_lo, a block
  // takes group g only if (cls_lo < cnt[g] <= cls_hi) == cls_in, so that two launches of
  // different shapes share the experts between them (DS4_CUDA_PREDECODE_SPLIT).
  int cls_lo = 0, cls_hi = 0;
  bool cls_in = false;
};

constexpr size_t kMmSmem = static_cast<size_t>(kMmWarps) * kMmStage +
                           static_cast<size_t>(kMmWarps) * kMmTok * 32 * sizeof(float) + sizeof(Tables);

template <uint32_t T, bool kVec>
__global__ void __launch_bounds__(kMmWarps * 32) matmat_kernel(MatmatArgs a) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t mm_smem[];
  uint8_t* stage = mm_smem;
  float* accs = reinterpret_cast<float*>(mm_smem + kMmWarps * kMmStage);
  Tables& tab = *reinterpret_cast<Tables*>(mm_smem + kMmWarps * kMmStage + kMmWarps * kMmTok * 32 * sizeof(float));
  const int g = blockIdx.y;
  const int n = a.cnt ? a.cnt[g] : a.n_tok;
  if (n <= 0 || static_cast<int64_t>(blockIdx.x) * kMmWarps >= a.n_rows) return;  // whole block
  if constexpr (T == kIQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tab.grid[i] = c_iq2_grid[i];
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kMmWarps + warp;
  if (r >= a.n_rows) return;  // no block-wide barrier follows
  const uint8_t* wrow = a.w + static_cast<size_t>(a.row0 + g * a.group_rows + r) * a.row_bytes;
  uint8_t* sm = stage + warp * kMmStage;
  float* acc = accs + warp * kMmTok * 32;
  constexpr int CB = MmChunk<T>::kBlocks;
  constexpr int kAct = ActFmt<T>::kBytes;
  const int64_t nblk = a.cols / Fmt<T>::kVals;
  const int32_t* list = a.list ? a.list + g * a.list_stride : nullptr;
  for (int k0 = 0; k0 < n; k0 += kMmTok) {
    const int nt = n - k0 < kMmTok ? n - k0 : kMmTok;
    for (int k = 0; k < nt; ++k) acc[k * 32 + lane] = 0.0f;
    for (int64_t c0 = 0; c0 < nblk; c0 += CB) {
      const int nb = static_cast<int>(nblk - c0 < CB ? nblk - c0 : CB);
      stage_chunk<T, kVec>(wrow, nblk, c0, nb, sm, lane);
      cp_async_wait();
      __syncwarp();
      for (int k = 0; k < nt; ++k) {
        const int64_t e = list ? list[k0 + k] : k0 + k;
        const uint8_t* x = a.act + static_cast<size_t>((e / a.in_div) * a.in_mul + g * a.in_gmul) * a.act_stride +
                           c0 * kAct;
        acc[k * 32 + lane] = dot_chunk<T>(sm, x, nb, lane, tab, acc[k * 32 + lane]);
      }
      __syncwarp();  // the stage is rewritten next
    }
    for (int k = 0; k < nt; ++k) {
      const int64_t e = list ? list[k0 + k] : k0 + k;
      const float v = dot_finish<T>(acc[k * 32 + lane]);
      if (lane == 0) a.y[e * a.y_stride + g * a.y_gstride + r] = v;
    }
    __syncwarp();
  }
}

// Token-per-lane matmat for the Q8_0-style formats (Q8_0, MXFP4: 32-value blocks, one scale,
// Q8_0 activations), where matmat_kernel spends most of its instructions on lane bookkeeping:
// lane k of a warp computes token k's dot of the warp's row. Per step of 8 blocks the block
// stages the 32 tokens' activation blocks in shared memory (rows padded to 73 words: lanes read
// different banks), each warp repacks its row's 8 blocks into int8x4 words (MXFP4: its doubled
// E2M1 codes) and f32 scales, then every lane forms each block's exact integer dot and
// s_b = (scale_w * d_x) * (float)isum_b into accumulator b mod 8, in block order — the
// per-accumulator sequence of quant::ref and matvec_kernel — and at the end the same tree
// ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)). Bit-identical to matvec.
constexpr int kLnWarps = 8;
constexpr int kLnStep = 8;                        // blocks per step (one per accumulator)
constexpr int kLnRowWords = kLnStep * 9 + 1;      // 8 activation blocks of 9 words, + 1 pad word

template <uint32_t T>
__global__ void __launch_bounds__(kLnWarps * 32) matmat_lane_kernel(MatmatArgs a) {
  pdl_wait();
  pdl_trigger();
  __shared__ int xs[32 * kLnRowWords];
  __shared__ int wq[kLnWarps][kLnStep * 8];
  __shared__ float wsc[kLnWarps][kLnStep];
  const int g = blockIdx.y;
  const int n = a.cnt ? a.cnt[g] : a.n_tok;
  if (n <= 0 || static_cast<int64_t>(blockIdx.x) * kLnWarps >= a.n_rows) return;  // whole block
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnWarps + warp;
  const bool active = r < a.n_rows;  // idle warps still take part in the barriers
  const uint8_t* wrow = a.w + static_cast<size_t>(a.row0 + g * a.group_rows + (active ? r : 0)) * a.row_bytes;
  const int64_t nblk = a.cols / 32;
  const int32_t* list = a.list ? a.list + g * a.list_stride : nullptr;
  for (int k0 = 0; k0 < n; k0 += 32) {
    const int nt = n - k0 < 32 ? n - k0 : 32;
    const int64_t e = lane < nt ? (list ? list[k0 + lane] : k0 + lane) : 0;
    float acc[kLnStep];
#pragma unroll
    for (int j = 0; j < kLnStep; ++j) acc[j] = 0.0f;
    for (int64_t c0 = 0; c0 < nblk; c0 += kLnStep) {
      const int nb = static_cast<int>(nblk - c0 < kLnStep ? nblk - c0 : kLnStep);
      // Activation tile: token k's nb blocks (9 words each) at xs[k * kLnRowWords].
      const int words = nb * 9;
      for (int i = threadIdx.x; i < nt * words; i += blockDim.x) {
        const int k = i / words, w = i % words;
        const int64_t ek = list ? list[k0 + k] : k0 + k;
        const auto* src = reinterpret_cast<const int*>(
            a.act + static_cast<size_t>((ek / a.in_div) * a.in_mul + g * a.in_gmul) * a.act_stride + c0 * 36);
        cp_async4(&xs[k * kLnRowWords + w], src + w);
      }
      // This warp's row: block j = lane / 4, part = lane % 4 (values 8*part .. 8*part+7).
      if (active) {
        const int j = lane >> 2, part = lane & 3;
        if (j < nb) {
          const Blk wb = blk<T>(wrow, nblk, c0 + j);
          int w0, w1;
          if constexpr (T == kQ8_0) {
            const uint8_t* q = wb.q + 8 * part;  // split payload: 8-byte aligned when the row is
            if (reinterpret_cast<uintptr_t>(q) % 8 == 0) {
              const int2 w = *reinterpret_cast<const int2*>(q);
              w0 = w.x;
              w1 = w.y;
            } else {
              w0 = static_cast<int>(ld16(q) | (ld16(q + 2) << 16));
              w1 = static_cast<int>(ld16(q + 4) | (ld16(q + 6) << 16));
            }
            if (part == 0) wsc[warp][j] = h2f(ld16(wb.t));
          } else {
            const uint8_t* wb = blk<T>(wrow, nblk, c0 + j).q;
            uint32_t v[2] = {0, 0};
            for (int t = 0; t < 8; ++t) {
              const int jj = 8 * part + t;
              const int code = jj < 16 ? (wb[1 + jj] & 15) : (wb[1 + jj - 16] >> 4);
              v[t / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(c_mx_doubled[code])) << (8 * (t % 4));
            }
            w0 = static_cast<int>(v[0]);
            w1 = static_cast<int>(v[1]);
            if (part == 0) wsc[warp][j] = c_mx_half[wb[0]];
          }
          wq[warp][j * 8 + 2 * part] = w0;
          wq[warp][j * 8 + 2 * part + 1] = w1;
        }
      }
      cp_async_wait();
      __syncthreads();
      if (active && lane < nt) {
        const int* xk = &xs[lane * kLnRowWords];
#pragma unroll
        for (int j = 0; j < kLnStep; ++j) {
          if (j < nb) {
            int isum = 0;
#pragma unroll
            for (int w = 0; w < 8; ++w) isum = __dp4a(wq[warp][j * 8 + w], xk[j * 9 + 1 + w], isum);
            const float xd = __int_as_float(xk[j * 9]);
            const float s = (wsc[warp][j] * xd) * static_cast<float>(isum);
            acc[j] = acc[j] + s;
          }
        }
      }
      __syncthreads();  // the tiles are rewritten next step
    }
    if (active && lane < nt) {
      const float out = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
      a.y[e * a.y_stride + g * a.y_gstride + r] = out;
    }
  }
}

// Matmat for the float formats (F32, F16, BF16) in the reference's order: chain c (element i
// into chain i mod 16, products rounded then added in element order), then the tree (c, c+8),
// (c, c+4), (c, c+2), (0, 1). Lane c of a half-warp owns chain c of a micro tile of kCfRows rows
// x kCfTok tokens (32 registers); the tree is the half-warp's shuffles 8, 4, 2, 1. A block's 8
// half-warps are 2 row groups x 4 token groups (16 rows x 16 tokens); the two half-warps of a
// warp share their tokens (uniform trip counts for the shuffles). Weights and inputs are read
// straight from global memory (16 consecutive elements per half-warp), reused through L1.
constexpr int kCfWarps = 4, kCfRows = 8, kCfTok = 4;
constexpr int kCfBlockRows = 2 * kCfRows, kCfBlockTok = 4 * kCfTok;

template <uint32_t T>
__global__ void __launch_bounds__(kCfWarps * 32) matmat_class_float_kernel(MatmatArgs a) {
  pdl_wait();
  pdl_trigger();
  const int g = blockIdx.y;
  const int n = a.cnt ? a.cnt[g] : a.n_tok;
  if (n <= 0 || static_cast<int64_t>(blockIdx.x) * kCfBlockRows >= a.n_rows) return;  // whole block
  const int hw = threadIdx.x >> 4, c = threadIdx.x & 15;
  const int rg = hw & 1, tg = hw >> 1;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kCfBlockRows + rg * kCfRows;
  const uint8_t* wr[kCfRows];
#pragma unroll
  for (int i = 0; i < kCfRows; ++i) {  // rows past the end read the last row, not written
    const int64_t r = r0 + i < a.n_rows ? r0 + i : a.n_rows - 1;
    wr[i] = a.w + static_cast<size_t>(a.row0 + g * a.group_rows + r) * a.row_bytes;
  }
  const int32_t* list = a.list ? a.list + g * a.list_stride : nullptr;
  const int step = static_cast<int>(gridDim.z) * kCfBlockTok;
  for (int k0 = static_cast<int>(blockIdx.z) * kCfBlockTok + tg * kCfTok; k0 < n; k0 += step) {
    const float* xr[kCfTok];
    int64_t ek[kCfTok];
#pragma unroll
    for (int j = 0; j < kCfTok; ++j) {  // tokens past n read token k0, not written
      const int k = k0 + j < n ? k0 + j : k0;
      ek[j] = list ? list[k] : k;
      xr[j] = reinterpret_cast<const float*>(
          a.act + static_cast<size_t>((ek[j] / a.in_div) * a.in_mul + g * a.in_gmul) * a.act_stride);
    }
    float acc[kCfRows][kCfTok];
#pragma unroll
    for (int i = 0; i < kCfRows; ++i)
#pragma unroll
      for (int j = 0; j < kCfTok; ++j) acc[i][j] = 0.0f;
#pragma unroll 2
    for (int v = c; v < a.cols; v += 16) {
      float w[kCfRows], x[kCfTok];
#pragma unroll
      for (int i = 0; i < kCfRows; ++i) w[i] = load_w<T>(wr[i], v);
#pragma unroll
      for (int j = 0; j < kCfTok; ++j) x[j] = __ldg(xr[j] + v);
#pragma unroll
      for (int i = 0; i < kCfRows; ++i)
#pragma unroll
        for (int j = 0; j < kCfTok; ++j) {
          const float p = w[i] * x[j];
          acc[i][j] = acc[i][j] + p;
        }
    }
#pragma unroll
    for (int i = 0; i < kCfRows; ++i)
#pragma unroll
      for (int j = 0; j < kCfTok; ++j) {
        float v = acc[i][j];
        for (int off = 8; off >= 1; off >>= 1) v = v + __shfl_down_sync(kFull, v, off, 16);
        if (c == 0 && r0 + i < a.n_rows && k0 + j < n) a.y[ek[j] * a.y_stride + g * a.y_gstride + r0 + i] = v;
      }
  }
}

// Tiled matmat for the dense float formats (F32, F16, BF16): the same arithmetic as
// matmat_class_float_kernel (chain c = lane c of a half-warp sums w[r][i] * x[k][i] for
// i = c, c+16, .. in increasing i, one rounded mul then one add per step; then the half-warp
// shuffle tree 8, 4, 2, 1), so results equal matvec bit for bit. Only the data movement differs:
//  - a block of 256 threads owns a tile of kFtRows (32) rows x kFtTok (32) tokens and walks the
//    columns in chunks of kFtKc (64); each chunk's weight rows (raw T) and input rows (f32) are
//    copied into shared memory with cp.async, double-buffered, so a weight is read from L2 once
//    per 32 tokens (was 16) and an input once per 32 rows (was 16), and the inner loop reads
//    shared memory only;
//  - warp w holds row group w % 4 (8 rows) and token group w / 4 (16 tokens); its half-warp h
//    takes tokens 2j + h (j = 0..7) of the group, lane c = chain c, so a thread keeps 8 x 8
//    accumulators of one chain. The two half-warps read the same weight words (broadcast) and
//    input rows one apart (stride kFtXs = 80 words: the halves fall on disjoint banks);
//  - chunk k covers columns 64k .. 64k+63 = steps s = 0..3 of 16 columns, so chain c still sees
//    its elements in increasing i; a last partial chunk (cols % 64 = 16, 32, 48) runs fewer steps.
// Rows past n_rows read the last row and tokens past n read token n - 1 (neither is written).
// Needs 16-byte aligned rows (w, row_bytes, act, act_stride); expert lists use the old kernel.
constexpr int kFtThreads = 256, kFtRows = 32, kFtTok = 32, kFtKc = 64, kFtXs = kFtKc + 16;

template <uint32_t T>
__global__ void __launch_bounds__(kFtThreads, 2) matmat_float_tiled_kernel(MatmatArgs a) {
  constexpr int kWb = T == kF32 ? 4 : 2;             // bytes per weight
  constexpr int kWRow = kFtKc * kWb;                 // bytes of one staged weight row
  constexpr int kWPieces = kFtRows * kWRow / 16 / kFtThreads;   // 16-byte copies per thread
  constexpr int kXPieces = kFtTok * kFtKc * 4 / 16 / kFtThreads;
  static_assert(kWPieces >= 1 && kXPieces >= 1, "every thread copies whole pieces");
  __shared__ __align__(16) uint8_t ws[2][kFtRows * kWRow];
  __shared__ __align__(16) float xs[2][kFtTok * kFtXs];
  pdl_wait();
  pdl_trigger();
  const int g = blockIdx.y;
  const int n = a.n_tok;
  const int64_t rt0 = static_cast<int64_t>(blockIdx.x) * kFtRows;
  if (n <= 0 || rt0 >= a.n_rows) return;  // whole block
  const int tid = threadIdx.x, warp = tid >> 5, h = (tid >> 4) & 1, c = tid & 15;
  const int rg = warp & 3, tg = warp >> 2;
  // This thread's weight copies: piece p = tid + i * 256 of the tile (row p / (kWRow / 16)).
  const uint8_t* wsrc[kWPieces];
  int wdst[kWPieces], wcol[kWPieces];
#pragma unroll
  for (int i = 0; i < kWPieces; ++i) {
    const int p = tid + i * kFtThreads, row = p / (kWRow / 16), q = p % (kWRow / 16);
    const int64_t r = rt0 + row < a.n_rows ? rt0 + row : a.n_rows - 1;
    wsrc[i] = a.w + static_cast<size_t>(a.row0 + g * a.group_rows + r) * a.row_bytes + q * 16;
    wdst[i] = row * kWRow + q * 16;
    wcol[i] = q * 16 / kWb;  // first column of the piece within the chunk
  }
  const int64_t cols = a.cols;
  const int nch = static_cast<int>((cols + kFtKc - 1) / kFtKc);
  const int64_t r0 = rt0 + rg * 8;
  const int step = static_cast<int>(gridDim.z) * kFtTok;
  for (int kt = static_cast<int>(blockIdx.z) * kFtTok; kt < n; kt += step) {
    const uint8_t* xsrc[kXPieces];
    int xdst[kXPieces], xcol[kXPieces];
#pragma unroll
    for (int i = 0; i < kXPieces; ++i) {
      const int p = tid + i * kFtThreads, tok = p / (kFtKc / 4), q = p % (kFtKc / 4);
      const int64_t k = kt + tok < n ? kt + tok : n - 1;
      xsrc[i] = a.act + static_cast<size_t>((k / a.in_div) * a.in_mul + g * a.in_gmul) * a.act_stride + q * 16;
      xdst[i] = tok * kFtXs + q * 4;
      xcol[i] = q * 4;
    }
    auto load = [&](int ch, int buf) {
      const int64_t c0 = static_cast<int64_t>(ch) * kFtKc;
      const int64_t rem = cols - c0;  // columns left (pieces past them are not copied)
#pragma unroll
      for (int i = 0; i < kWPieces; ++i)
        if (wcol[i] < rem) cp_async16(&ws[buf][wdst[i]], wsrc[i] + c0 * kWb);
#pragma unroll
      for (int i = 0; i < kXPieces; ++i)
        if (xcol[i] < rem) cp_async16(&xs[buf][xdst[i]], xsrc[i] + c0 * 4);
      cp_async_commit();
    };
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    load(0, 0);
    for (int ch = 0; ch < nch; ++ch) {
      const int buf = ch & 1;
      if (ch + 1 < nch) load(ch + 1, buf ^ 1);
      else cp_async_commit();  // an empty group keeps the wait count uniform
      cp_async_wait_group<1>();
      __syncthreads();
      const int64_t left = cols - static_cast<int64_t>(ch) * kFtKc;
      const int steps = left >= kFtKc ? kFtKc / 16 : static_cast<int>(left / 16);
      const uint8_t* wsb = &ws[buf][rg * 8 * kWRow];
      const float* xsb = &xs[buf][(tg * 16 + h) * kFtXs];
#pragma unroll
      for (int s = 0; s < kFtKc / 16; ++s) {
        if (s < steps) {
          float w[8], x[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) w[i] = load_w<T>(wsb + i * kWRow, s * 16 + c);
#pragma unroll
          for (int j = 0; j < 8; ++j) x[j] = xsb[2 * j * kFtXs + s * 16 + c];
#pragma unroll
          for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const float p = w[i] * x[j];
              acc[i][j] = acc[i][j] + p;
            }
        }
      }
      __syncthreads();  // buffer `buf` is refilled next chunk (or by the next token tile's first)
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float v = acc[i][j];
        for (int off = 8; off >= 1; off >>= 1) v = v + __shfl_down_sync(kFull, v, off, 16);
        const int k = kt + tg * 16 + 2 * j + h;
        if (c == 0 && r0 + i < a.n_rows && k < n)
          a.y[static_cast<int64_t>(k) * a.y_stride + g * a.y_gstride + r0 + i] = v;
      }
  }
}

// Q8_0 / IQ2_XXS / Q2_K / Q4_K matmat with the integer block dots on tensor cores (the others below). mma.m16n8k32 (s8 x s8 -> s32) takes
// exactly one 32-value block: for a 16-row x 8-token tile it returns every isum_b exactly (integer
// sums do not depend on their order), and each lane applies the reference's float steps to its
// four (row, token) entries: s = (d_w * d_x) * (float)isum_b into accumulator b mod 8 in block
// order, then ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)). Bit-identical to matvec.
// Fragments (g = lane / 4, t = lane % 4): A a0..a3 = rows g, g+8 x values 4t..4t+3 and
// 16+4t..16+4t+3 of the block; B b0, b1 = values 4t.., 16+4t.. of token g; C c0..c3 = (row g,
// token 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). A block of kMqWarps warps takes 16 rows and
// kMqWarps x 8 tokens at a time (expert lists: 16 rows per warp). Weights are split rows
// (weight_layout.cuh), 4-byte aligned.
constexpr int kMqWarps = 4;
// IQ2_XXS token tiles of 8 per pass (session 7, 512-token chunks at 2K: gate/up 1475 -> 1040 us per
// call at 2 tiles, 1590 at 4 (116 registers); Q2_K down 1284 -> 1673 at 2, so the K-quants keep 1).
constexpr int kMqTiles = 2;

__device__ __forceinline__ void mma_s8_16x8x32(const int (&a)[4], int b0, int b1, int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
#else
  c[0] = c[1] = c[2] = c[3] = 0;  // not built below sm_80 (launch_matmat checks)
#endif
}

// mma m16n8k32 s8 accumulating into c (c += A·B, exact in s32 as the separate sums are).
__device__ __forceinline__ void mma_s8_16x8x32_acc(const int (&a)[4], int b0, int b1, int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// mma m16n8k16 with a signed int8 A (a0 = row g, k 4t..4t+3; a1 = row g + 8) and an int8 B
// (b = k 4t..4t+3 of column g), signed or unsigned by kBSigned, accumulating into c (same C
// layout as m16n8k32).
template <bool kBSigned>
__device__ __forceinline__ void mma_s8_16x8x16_acc(int a0, int a1, int b, int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBSigned)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
#endif
}

// Payload bytes of a block of a split format (weight_layout.cuh); the whole block otherwise.
template <uint32_t T>
__host__ __device__ constexpr int payload_bytes() {
  if constexpr (Split<T>::kOn) return Split<T>::kBulk;
  else return Fmt<T>::kBytes;
}

// One IQ2_XXS 32-value group of a 16-row A tile (its 8-byte words qg of row g, qg8 of row g + 8;
// t = lane % 4: values 4t.. are grid entry t/2, half t%2, values 16 + 4t.. entry 2 + t/2) against
// nt <= NT token tiles: one m16n8k32 per tile with B read at yq(j) (token tile j's group bytes for
// this lane's token row), each integer sum times its row's odd group scale 2s + 1 into isum[j].
template <int NT, class YRow>
__device__ __forceinline__ void iq2_group_mmas(uint2 qg, uint2 qg8, int t, const Tables& tab, int nt, YRow yq,
                                               int (&isum)[NT][4]) {
  const int e = t >> 1, h = t & 1;
  const int av[4] = {iq2_word(qg.x, qg.y, e, h, tab), iq2_word(qg8.x, qg8.y, e, h, tab),
                     iq2_word(qg.x, qg.y, 2 + e, h, tab), iq2_word(qg8.x, qg8.y, 2 + e, h, tab)};
  const int sg = static_cast<int>(2 * (qg.y >> 28) + 1), sg8 = static_cast<int>(2 * (qg8.y >> 28) + 1);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j >= nt) break;  // uniform
    int c[4];
    const uint8_t* y = yq(j);
    mma_s8_16x8x32(av, ld32(y + 4 * t), ld32(y + 16 + 4 * t), c);
    isum[j][0] += c[0] * sg;
    isum[j][1] += c[1] * sg;
    isum[j][2] += c[2] * sg8;
    isum[j][3] += c[3] * sg8;
  }
}

// A fragment of 32-value part `part` of a Q2_K / Q4_K block (weight rows g at bg, g + 8 at bg8;
// t = lane % 4): Q2_K's 2-bit codes times their 4-bit sub-block scales (<= 45: fits int8), scale
// byte i of row g (r = 0) or g + 8 (r = 1) read through sbyte(r, i); Q4_K's 4-bit codes (its 6-bit
// scale exceeds int8 and multiplies the exact integer sums instead).
template <uint32_t T, class ScaleByte>
__device__ __forceinline__ void kquant_a_frag(const uint8_t* bg, const uint8_t* bg8, int part, int t, ScaleByte sbyte,
                                              int (&av)[4]) {
  if constexpr (T == kQ2_K) {
    const int off = 16 + 32 * (part / 4) + 4 * t, shift = 2 * (part % 4);
    const int s0 = sbyte(0, 2 * part) & 15, s1 = sbyte(0, 2 * part + 1) & 15;
    const int t0 = sbyte(1, 2 * part) & 15, t1 = sbyte(1, 2 * part + 1) & 15;
    av[0] = ((ld32(bg + off) >> shift) & 0x03030303) * s0;
    av[1] = ((ld32(bg8 + off) >> shift) & 0x03030303) * t0;
    av[2] = ((ld32(bg + off + 16) >> shift) & 0x03030303) * s1;
    av[3] = ((ld32(bg8 + off + 16) >> shift) & 0x03030303) * t1;
  } else {
    const int off = 16 + 32 * (part / 2) + 4 * t, shift = 4 * (part & 1);
    av[0] = (ld32(bg + off) >> shift) & 0x0f0f0f0f;
    av[1] = (ld32(bg8 + off) >> shift) & 0x0f0f0f0f;
    av[2] = (ld32(bg + off + 16) >> shift) & 0x0f0f0f0f;
    av[3] = (ld32(bg8 + off + 16) >> shift) & 0x0f0f0f0f;
  }
}

// T = Q8_0 (Q8_0 activations), IQ2_XXS (Q8_K activations; one MMA per 32-value group, the
// group's odd scale applied to the exact sums in integers, then the block value in block order)
// or Q2_K/Q4_K (Q8_K activations; one MMA per 32-value part, see below).
template <uint32_t T>
__global__ void __launch_bounds__(kMqWarps * 32) matmat_mma_kernel(MatmatArgs a) {
  pdl_wait();
  pdl_trigger();
  __shared__ Tables tab;
  const int grp = blockIdx.y;
  const int n = a.cnt ? a.cnt[grp] : a.n_tok;
  // Expert lists (a.cnt) hold a few tokens per expert: each warp takes its own 16 rows and all
  // the tokens; dense launches: the block's warps share 16 rows (L1 reuse), 8 tokens each.
  const bool own_rows = a.cnt != nullptr;
  const int64_t rows_per_block = own_rows ? 16 * kMqWarps : 16;
  if (n <= 0 || static_cast<int64_t>(blockIdx.x) * rows_per_block >= a.n_rows) return;  // whole block
  if constexpr (T == kIQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tab.grid[i] = c_iq2_grid[i];
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block + (own_rows ? 16 * warp : 0);
  if (r0 >= a.n_rows) return;  // whole warp (no block-wide synchronisation below)
  constexpr int B = payload_bytes<T>();     // payload bytes per weight block (split formats)
  constexpr int kAct = ActFmt<T>::kBytes;   // activation bytes per block
  const int64_t nblk = a.cols / Fmt<T>::kVals;
  const int32_t* list = a.list ? a.list + grp * a.list_stride : nullptr;
  auto wrow = [&](int64_t r) {  // row r of this group (clamped: rows past the end are read, not used)
    const int64_t rr = r < a.n_rows ? r : a.n_rows - 1;
    return a.w + static_cast<size_t>(a.row0 + grp * a.group_rows + rr) * a.row_bytes;
  };
  const uint8_t* wg = wrow(r0 + g);
  const uint8_t* wg8 = wrow(r0 + g + 8);
  auto entry = [&](int k) { return list ? static_cast<int64_t>(list[k]) : static_cast<int64_t>(k); };
  auto xrow = [&](int64_t e) {
    return a.act + static_cast<size_t>((e / a.in_div) * a.in_mul + grp * a.in_gmul) * a.act_stride;
  };
  // IQ2_XXS passes cover NT token tiles of 8 (each decoded weight fragment feeds NT MMAs); the
  // other formats one tile, with the loop body they had before the tiles (same registers).
  constexpr int NT = T == kIQ2_XXS ? kMqTiles : 1;
  for (int k0 = own_rows ? 0 : warp * 8 * NT; k0 < n; k0 += own_rows ? 8 * NT : kMqWarps * 8 * NT) {
    // This lane's B token (g) and its output tokens (2t, 2t+1); tokens past n read token k0.
    const int kb = k0 + g < n ? k0 + g : k0;
    const int ka = k0 + 2 * t < n ? k0 + 2 * t : k0, kc = k0 + 2 * t + 1 < n ? k0 + 2 * t + 1 : k0;
    const uint8_t* xb = xrow(entry(kb));
    const uint8_t* xa = xrow(entry(ka));
    const uint8_t* xc = xrow(entry(kc));
    float out[4];
    if constexpr (T == kQ8_0) {
      float p[8][4];
#pragma unroll
      for (int s = 0; s < 8; ++s) p[s][0] = p[s][1] = p[s][2] = p[s][3] = 0.0f;
      for (int64_t b0 = 0; b0 < nblk; b0 += 8) {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const int64_t b = b0 + s;
          if (b >= nblk) break;  // uniform
          const int av[4] = {ld32(wg + b * B + 4 * t), ld32(wg8 + b * B + 4 * t), ld32(wg + b * B + 16 + 4 * t),
                             ld32(wg8 + b * B + 16 + 4 * t)};
          int c[4];
          mma_s8_16x8x32(av, ld32(xb + b * kAct + 4 + 4 * t), ld32(xb + b * kAct + 20 + 4 * t), c);
          const float dg = h2f(ld16(wg + nblk * B + 2 * b)), dg8 = h2f(ld16(wg8 + nblk * B + 2 * b));
          const float xda = *reinterpret_cast<const float*>(xa + b * kAct);
          const float xdc = *reinterpret_cast<const float*>(xc + b * kAct);
          p[s][0] = p[s][0] + (dg * xda) * static_cast<float>(c[0]);
          p[s][1] = p[s][1] + (dg * xdc) * static_cast<float>(c[1]);
          p[s][2] = p[s][2] + (dg8 * xda) * static_cast<float>(c[2]);
          p[s][3] = p[s][3] + (dg8 * xdc) * static_cast<float>(c[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
        out[i] = ((p[0][i] + p[4][i]) + (p[2][i] + p[6][i])) + ((p[1][i] + p[5][i]) + (p[3][i] + p[7][i]));
    } else if constexpr (T == kQ2_K || T == kQ4_K) {
      // 32-value parts: Q2_K part p = sub-blocks 2p, 2p+1 (codes 0..3 times their 4-bit scale
      // fit int8, so one MMA gives sum_j sc_j * sum q y for both); Q4_K part j = sub-block j
      // (codes 0..15, one MMA, then the 6-bit scale in integers). The min term is the scalar
      // dot of the activation's bsums with the mins, as k_part.
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t b = 0; b < nblk; ++b) {
        const uint8_t* bg = wg + b * Fmt<T>::kBytes;
        const uint8_t* bg8 = wg8 + b * Fmt<T>::kBytes;
        const uint8_t* ya = xa + b * kAct;
        const uint8_t* yc = xc + b * kAct;
        int isum[4] = {0, 0, 0, 0}, summs[4] = {0, 0, 0, 0};
#pragma unroll
        for (int part = 0; part < 8; ++part) {
          int av[4];
          kquant_a_frag<T>(bg, bg8, part, t, [&](int r, int i) { return static_cast<int>((r ? bg8 : bg)[i]); }, av);
          int c[4];
          const uint8_t* yq = xb + b * kAct + 4 + 32 * part;
          mma_s8_16x8x32(av, ld32(yq + 4 * t), ld32(yq + 16 + 4 * t), c);
          if constexpr (T == kQ2_K) {
#pragma unroll
            for (int i = 0; i < 4; ++i) isum[i] += c[i];
          } else {  // the sub-block's 6-bit scale (k_part's unpacking)
            auto sc_of = [&](const uint8_t* blk) {
              const uint8_t* sc = blk + 4;
              return part < 4 ? (sc[part] & 63) : ((sc[part + 4] & 15) | ((sc[part - 4] >> 6) << 4));
            };
            const int sg = sc_of(bg), sg8 = sc_of(bg8);
            isum[0] += sg * c[0];
            isum[1] += sg * c[1];
            isum[2] += sg8 * c[2];
            isum[3] += sg8 * c[3];
          }
        }
        // Min corrections: Q2_K sum_j bsums_j * (sc_j >> 4) over 16 sub-blocks; Q4_K
        // sum_j mn_j * (bsums_2j + bsums_2j+1) over 8.
        const auto* bsa = reinterpret_cast<const int16_t*>(ya + 260);
        const auto* bsc = reinterpret_cast<const int16_t*>(yc + 260);
        if constexpr (T == kQ2_K) {
          for (int j = 0; j < 16; ++j) {
            const int m = bg[j] >> 4, m8 = bg8[j] >> 4;
            summs[0] += bsa[j] * m;
            summs[1] += bsc[j] * m;
            summs[2] += bsa[j] * m8;
            summs[3] += bsc[j] * m8;
          }
        } else {
          for (int j = 0; j < 8; ++j) {
            auto mn_of = [&](const uint8_t* blk) {
              const uint8_t* sc = blk + 4;
              return j < 4 ? (sc[j + 4] & 63) : ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
            };
            const int m = mn_of(bg), m8 = mn_of(bg8);
            summs[0] += m * (bsa[2 * j] + bsa[2 * j + 1]);
            summs[1] += m * (bsc[2 * j] + bsc[2 * j + 1]);
            summs[2] += m8 * (bsa[2 * j] + bsa[2 * j + 1]);
            summs[3] += m8 * (bsc[2 * j] + bsc[2 * j + 1]);
          }
        }
        const int off = T == kQ2_K ? 80 : 0;  // d, dmin
        const float yda = *reinterpret_cast<const float*>(ya), ydc = *reinterpret_cast<const float*>(yc);
        const float wd[2] = {h2f(ld16(bg + off)), h2f(ld16(bg8 + off))};
        const float wm[2] = {h2f(ld16(bg + off + 2)), h2f(ld16(bg8 + off + 2))};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float yd = (i & 1) ? ydc : yda;
          const float dall = yd * wd[i >> 1], dmin = yd * wm[i >> 1];
          acc[i] = acc[i] + (dall * static_cast<float>(isum[i]) - dmin * static_cast<float>(summs[i]));
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = acc[i];
    } else {  // IQ2_XXS: NT tiles with their own token rows and stores (xb/xa/xc/out unused)
      const int nt = (n - k0 + 7) / 8 < NT ? (n - k0 + 7) / 8 : NT;
      const uint8_t* tb[NT];
      const uint8_t* ta[NT];
      const uint8_t* tc[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int kj = k0 + 8 * j;
        const int jb = kj + g < n ? kj + g : k0;
        const int ja = kj + 2 * t < n ? kj + 2 * t : k0, jc = kj + 2 * t + 1 < n ? kj + 2 * t + 1 : k0;
        tb[j] = xrow(entry(jb));
        ta[j] = xrow(entry(ja));
        tc[j] = xrow(entry(jc));
      }
      float acc[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      for (int64_t b = 0; b < nblk; ++b) {
        int isum[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) isum[j][0] = isum[j][1] = isum[j][2] = isum[j][3] = 0;
#pragma unroll
        for (int gi = 0; gi < 8; ++gi)
          iq2_group_mmas(*reinterpret_cast<const uint2*>(wg + b * B + 8 * gi),
                         *reinterpret_cast<const uint2*>(wg8 + b * B + 8 * gi), t, tab, nt,
                         [&](int j) { return tb[j] + b * kAct + 4 + 32 * gi; }, isum);
        const float dg = h2f(ld16(wg + nblk * B + 2 * b)), dg8 = h2f(ld16(wg8 + nblk * B + 2 * b));
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j >= nt) break;
          const float yda = *reinterpret_cast<const float*>(ta[j] + b * kAct);
          const float ydc = *reinterpret_cast<const float*>(tc[j] + b * kAct);
          acc[j][0] = acc[j][0] + (dg * yda) * static_cast<float>(isum[j][0]);
          acc[j][1] = acc[j][1] + (dg * ydc) * static_cast<float>(isum[j][1]);
          acc[j][2] = acc[j][2] + (dg8 * yda) * static_cast<float>(isum[j][2]);
          acc[j][3] = acc[j][3] + (dg8 * ydc) * static_cast<float>(isum[j][3]);
        }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t r = r0 + g + (i >= 2 ? 8 : 0);
          const int k = k0 + 8 * j + 2 * t + (i & 1);
          if (j < nt && r < a.n_rows && k < n) a.y[entry(k) * a.y_stride + grp * a.y_gstride + r] = 0.125f * acc[j][i];
        }
    }
    if constexpr (T != kIQ2_XXS) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = r0 + g + (i >= 2 ? 8 : 0);
        const int k = k0 + 2 * t + (i & 1);
        if (r < a.n_rows && k < n) a.y[entry(k) * a.y_stride + grp * a.y_gstride + r] = out[i];
      }
    }
  }
}

// Expert-list matmat (a.cnt) of IQ2_XXS / Q2_K / Q4_K staged through shared memory (below:
// sg_tile, matmat_predecode_kernel). K runs in tiles of kSgBlk super-blocks; each tile's weight
// payloads (contiguous per row), the IQ2_XXS scale fields (kSgBlk f16 per row) and the pass's
// Q8_K activation blocks (contiguous per token) are copied by 16-byte cp.async (scales 8-byte),
// double buffered, at a stride that is an odd multiple of 16 bytes, so a fragment read of 8 rows
// (or 8 tokens) x 4 lanes hits 32 distinct banks. (matmat_mma_kernel reads every fragment from
// global memory, 8 rows x 4-8 bytes per load: bound by L1 wavefronts.) Launched only when the
// block count is a multiple of kSgBlk (no partial K tile; it is also what makes every Q8_K
// activation row 16-byte aligned: 4 * 292 = 73 * 16) and rows and bases are 16-byte aligned.
constexpr int kSgBlk = 4;

// Scale-field bytes of a block of a split format (weight_layout.cuh); 0 otherwise.
template <uint32_t T>
__host__ __device__ constexpr int tail_bytes() {
  if constexpr (Split<T>::kOn) return Split<T>::kTail;
  else return 0;
}

// One staged K tile (kSgBlk blocks) of a warp's 16 rows against nt <= NT token tiles of 8:
// ws = the warp's row g in the stage's weights, tw = its scale fields (IQ2_XXS), xs = the
// stage's activations (token 8j + i at i * kXStride). Every decoded A fragment feeds the nt
// MMAs; each block's integer sums and float steps are matmat_mma_kernel's, into acc[j] in block
// order, so results equal matvec bit for bit.
template <uint32_t T, int NT, int kWStride, int kTail, int kXStride, int kBlk = kSgBlk>
__device__ __forceinline__ void sg_tile(const uint8_t* ws, const uint8_t* tw, const uint8_t* xs, int nt, int g, int t,
                                        const Tables& tab, float (&acc)[NT][4]) {
  constexpr int B = payload_bytes<T>(), kAct = ActFmt<T>::kBytes;
  for (int bi = 0; bi < kBlk; ++bi) {
    int isum[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) isum[j][0] = isum[j][1] = isum[j][2] = isum[j][3] = 0;
    if constexpr (T == kIQ2_XXS) {
      const uint8_t* bg = ws + bi * B;
#pragma unroll
      for (int gi = 0; gi < 8; ++gi)
        iq2_group_mmas(*reinterpret_cast<const uint2*>(bg + 8 * gi),
                       *reinterpret_cast<const uint2*>(bg + 8 * kWStride + 8 * gi), t, tab, nt,
                       [&](int j) { return xs + (8 * j + g) * kXStride + bi * kAct + 4 + 32 * gi; }, isum);
      const uint8_t* ts = tw + 2 * bi;
      const float dg = h2f(ld16(ts)), dg8 = h2f(ld16(ts + 8 * kTail));
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j >= nt) break;
        const float yda = *reinterpret_cast<const float*>(xs + (8 * j + 2 * t) * kXStride + bi * kAct);
        const float ydc = *reinterpret_cast<const float*>(xs + (8 * j + 2 * t + 1) * kXStride + bi * kAct);
        acc[j][0] = acc[j][0] + (dg * yda) * static_cast<float>(isum[j][0]);
        acc[j][1] = acc[j][1] + (dg * ydc) * static_cast<float>(isum[j][1]);
        acc[j][2] = acc[j][2] + (dg8 * yda) * static_cast<float>(isum[j][2]);
        acc[j][3] = acc[j][3] + (dg8 * ydc) * static_cast<float>(isum[j][3]);
      }
    } else {  // Q2_K / Q4_K: matmat_mma_kernel's 32-value parts and min corrections
      const uint8_t* bg = ws + bi * B;
      const uint8_t* bg8 = bg + 8 * kWStride;
      // The scale bytes of rows g, g + 8 as words, read once per block (4 bytes per
      // shared-memory read) and unpacked as matmat_mma_kernel does: Q2_K bytes 0..15
      // (scale | min << 4), Q4_K bytes 4..15 (k_part's 6-bit scales and mins).
      constexpr int kSw = T == kQ2_K ? 4 : 3, kSo = T == kQ2_K ? 0 : 4;
      uint32_t sw[kSw], sw8[kSw];
#pragma unroll
      for (int i = 0; i < kSw; ++i) {
        sw[i] = static_cast<uint32_t>(ld32(bg + kSo + 4 * i));
        sw8[i] = static_cast<uint32_t>(ld32(bg8 + kSo + 4 * i));
      }
      auto sbyte = [](const uint32_t(&w)[kSw], int i) { return static_cast<int>((w[i >> 2] >> (8 * (i & 3))) & 0xff); };
#pragma unroll
      for (int part = 0; part < 8; ++part) {
        int av[4];
        int sg = 1, sg8 = 1;
        kquant_a_frag<T>(bg, bg8, part, t, [&](int r, int i) { return sbyte(r ? sw8 : sw, i); }, av);
        if constexpr (T != kQ2_K) {
          auto sc_of = [&](const uint32_t(&w)[kSw]) {  // the sub-block's 6-bit scale
            return part < 4 ? (sbyte(w, part) & 63) : ((sbyte(w, part + 4) & 15) | ((sbyte(w, part - 4) >> 6) << 4));
          };
          sg = sc_of(sw);
          sg8 = sc_of(sw8);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j >= nt) break;  // uniform
          const uint8_t* yq = xs + (8 * j + g) * kXStride + bi * kAct + 4 + 32 * part;
          if constexpr (T == kQ2_K) {
            mma_s8_16x8x32_acc(av, ld32(yq + 4 * t), ld32(yq + 16 + 4 * t), isum[j]);
          } else {
            int c[4];
            mma_s8_16x8x32(av, ld32(yq + 4 * t), ld32(yq + 16 + 4 * t), c);
            isum[j][0] += sg * c[0];
            isum[j][1] += sg * c[1];
            isum[j][2] += sg8 * c[2];
            isum[j][3] += sg8 * c[3];
          }
        }
      }
      const int off = T == kQ2_K ? 80 : 0;  // d, dmin
      const float wd[2] = {h2f(ld16(bg + off)), h2f(ld16(bg8 + off))};
      const float wm[2] = {h2f(ld16(bg + off + 2)), h2f(ld16(bg8 + off + 2))};
      // Q2_K's min correction as a 16-row x 16-sub-block x 8-token integer product on the tensor
      // cores: A = the 4-bit mins of sub-blocks 4t.. (scale bytes >> 4), B = each token's int16
      // bsums split into unsigned low and signed high bytes (bsum = lo + 256 hi), so
      // summs = A·hi * 256 + A·lo, exactly the sum below (SASS: ~100 instructions per token tile
      // and block there, ~12 here).
      int ma = 0, ma8 = 0;
      if constexpr (T == kQ2_K) {
        ma = (ld32(bg + 4 * t) >> 4) & 0x0f0f0f0f;
        ma8 = (ld32(bg8 + 4 * t) >> 4) & 0x0f0f0f0f;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (j >= nt) break;
        const uint8_t* ya = xs + (8 * j + 2 * t) * kXStride + bi * kAct;
        const uint8_t* yc = ya + kXStride;
        // Min corrections (exact integers, so the pairing of terms is free): Q2_K
        // sum_q bsums_q * (sc_q >> 4) over 16 sub-blocks; Q4_K sum_q mn_q * (bsums_2q +
        // bsums_2q+1) over 8. bsums 2q, 2q+1 are one 4-byte word.
        int summs[4] = {0, 0, 0, 0};
        if constexpr (T == kQ2_K) {
          const uint8_t* yb = xs + (8 * j + g) * kXStride + bi * kAct + 260 + 8 * t;
          const uint32_t w0 = static_cast<uint32_t>(ld32(yb)), w1 = static_cast<uint32_t>(ld32(yb + 4));
          mma_s8_16x8x16_acc<true>(ma, ma8, static_cast<int>(__byte_perm(w0, w1, 0x7531)), summs);
#pragma unroll
          for (int i = 0; i < 4; ++i) summs[i] *= 256;
          mma_s8_16x8x16_acc<false>(ma, ma8, static_cast<int>(__byte_perm(w0, w1, 0x6420)), summs);
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const short2 pa = *reinterpret_cast<const short2*>(ya + 260 + 4 * q);
            const short2 pc = *reinterpret_cast<const short2*>(yc + 260 + 4 * q);
            auto mn_of = [&](const uint32_t(&w)[kSw]) {
              return q < 4 ? (sbyte(w, q + 4) & 63) : ((sbyte(w, q + 4) >> 4) | ((sbyte(w, q) >> 6) << 4));
            };
            const int m = mn_of(sw), m8 = mn_of(sw8);
            summs[0] += m * (pa.x + pa.y);
            summs[1] += m * (pc.x + pc.y);
            summs[2] += m8 * (pa.x + pa.y);
            summs[3] += m8 * (pc.x + pc.y);
          }
        }
        const float yda = *reinterpret_cast<const float*>(ya), ydc = *reinterpret_cast<const float*>(yc);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float yd = (i & 1) ? ydc : yda;
          const float dall = yd * wd[i >> 1], dmin = yd * wm[i >> 1];
          acc[j][i] = acc[j][i] + (dall * static_cast<float>(isum[j][i]) - dmin * static_cast<float>(summs[i]));
        }
      }
    }
  }
}

// Weights decoded once per pass of up to 8 * kG tokens: decoding an A fragment (IQ2_XXS grid
// lookups and signs, Q2_K codes x scales) is most of the instructions, and an expert's ~48 tokens
// at 2048-token chunks took 3 decodes and 3 weight fetches in passes of 2 token tiles (session 8:
// gate 2738 -> 2158 us per call, down 2906 -> 2368).
// This kernel is the same K-tile step (sg_tile) with a pass of G = kG token tiles: a block of kW
// warps takes 16 * kW rows of one expert, every decoded fragment (4 registers per lane, each
// lane decodes only its own fragment words, so nothing is decoded twice within a pass) feeds G
// MMAs, and acc[G][4] per lane persists over the K loop. Loop order: passes of 8 * kG tokens
// (one for an expert with <= 8 * kG tokens; more re-decode the weights once per pass), K tiles
// of kSgBlk blocks ascending within each pass. The steps (pass, K tile) form one flat
// double-buffered cp.async pipeline, so the next pass's first tile (and its token pointers, two
// buffers by pass parity) is fetched while the current pass's last tile is computed.
// Why registers rather than decoded int8 fragments in shared memory: a fragment is needed by the
// G MMAs of the same part right after its decode, so holding it in registers costs nothing; a
// shared-memory copy would add a store and G loads per fragment and 16 KB per 64 rows and block
// without removing any decode. The limit on G is the stage's activations (8 * G tokens x 1168
// bytes), hence the wider blocks (kW = 8) that share them between more rows.
// Bit identity: per output, the same integer MMA sums, integer scale products and float steps
// as matmat_mma_kernel, blocks in ascending order into the same
// accumulator (K tiles ascending, blocks ascending within a tile); only which pass a token
// falls in and the order between different outputs change.
template <uint32_t T, int kG, int kW, int kBlk = kSgBlk>
struct Pd {
  static constexpr int G = kG;
  static constexpr int kRows = 16 * kW;
  static constexpr int kTok = 8 * kG;
  static constexpr int kAct = ActFmt<T>::kBytes;
  // Rows and activation tiles are staged at strides that are odd multiples of 16 bytes (bank-
  // conflict-free fragment reads of 8 rows or tokens x 4 lanes), by 16-byte copies when they are
  // whole 16-byte chunks (kBlk = 4), else 8-byte ones (kBlk = 2: Q2_K rows of 168 bytes at 176,
  // activation tiles of 584 bytes at 592).
  static constexpr int pad_odd16(int b) { return (b + 15) / 16 % 2 ? (b + 15) / 16 * 16 : (b + 15) / 16 * 16 + 16; }
  static constexpr int kWBytes = kBlk * payload_bytes<T>();
  static constexpr int kWStride = pad_odd16(kWBytes);
  static constexpr int kTail = kBlk * tail_bytes<T>();
  static constexpr int kXBytes = kBlk * kAct;  // a token's activation bytes per K tile
  static constexpr int kXStride = pad_odd16(kXBytes);
  static constexpr int kT = kRows * kWStride;
  static constexpr int kX = kT + (kRows * kTail + 15) / 16 * 16;
  static constexpr int kStage = kX + kTok * kXStride;
  // Dynamic shared memory: [IQ2_XXS grid] [row pointers] [token pointers x 2] [stage 0] [stage 1].
  static constexpr int kTab = T == kIQ2_XXS ? static_cast<int>(sizeof(Tables)) : 0;
  static constexpr int kPtr = kTab + (kRows + 2 * kTok) * 8;
  static constexpr int kStages = (kPtr + 15) / 16 * 16;
  static constexpr size_t kSmem = static_cast<size_t>(kStages) + 2 * static_cast<size_t>(kStage);
  static_assert(kWBytes % 8 == 0 && kXBytes % 8 == 0 && kXStride % 16 == 0 && (kXStride / 16) % 2 == 1 &&
                    kStage % 16 == 0 && (kTail == 0 || kTail == 4 || kTail == 8),
                "staged rows must be 16-byte (weights) or 8-byte (activations) copies at an odd multiple of 16 bytes");
  static_assert(kSmem <= 227 * 1024, "predecode stages exceed a block's shared memory");
};

template <uint32_t T, int kG, int kW, int kBlk = kSgBlk, int kMinBlocks = 0>
__global__ void __launch_bounds__(kW * 32, kMinBlocks) matmat_predecode_kernel(MatmatArgs a) {
  pdl_wait();
  pdl_trigger();
  using L = Pd<T, kG, kW, kBlk>;
  constexpr int G = L::G, B = payload_bytes<T>(), kAct = L::kAct;
  extern __shared__ __align__(16) uint8_t pd_smem[];
  const Tables& tab = *reinterpret_cast<const Tables*>(pd_smem);
  const uint8_t** wp = reinterpret_cast<const uint8_t**>(pd_smem + L::kTab);  // the block's rows
  const uint8_t** xp = wp + L::kRows;  // pass p's tokens at xp + (p & 1) * kTok
  uint8_t* stages = pd_smem + L::kStages;
  const int grp = blockIdx.y;
  const int n = a.cnt[grp];
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * L::kRows;
  if (n <= 0 || rb >= a.n_rows) return;  // whole block
  if (a.cls_hi > a.cls_lo && ((a.cls_lo < n && n <= a.cls_hi) != a.cls_in)) return;  // the other launch's expert
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
  if constexpr (T == kIQ2_XXS) {
    Tables& tw = *reinterpret_cast<Tables*>(pd_smem);
    for (int i = tid; i < 256; i += blockDim.x) tw.grid[i] = c_iq2_grid[i];
  }
  for (int i = tid; i < L::kRows; i += blockDim.x) {  // rows past the end read the last row, not written
    const int64_t r = rb + i < a.n_rows ? rb + i : a.n_rows - 1;
    wp[i] = a.w + static_cast<size_t>(a.row0 + grp * a.group_rows + r) * a.row_bytes;
  }
  const int64_t r0 = rb + 16 * warp;
  const bool live = r0 < a.n_rows;  // warps past the rows still copy and synchronise
  const int64_t nblk = a.cols / Fmt<T>::kVals;
  const int nkt = static_cast<int>(nblk / kBlk);
  const int npass = (n + L::kTok - 1) / L::kTok;
  const int nsteps = npass * nkt;
  const int32_t* list = a.list ? a.list + grp * a.list_stride : nullptr;
  auto entry = [&](int k) { return list ? static_cast<int64_t>(list[k]) : static_cast<int64_t>(k); };
  auto tiles = [&](int p) {  // token tiles of pass p
    const int left = (n - p * L::kTok + 7) / 8;
    return left < G ? left : G;
  };
  auto fill = [&](int p) {  // pass p's token pointers; tokens past n read the pass's first token, not written
    const int k0 = p * L::kTok;
    const uint8_t** dst = xp + (p & 1) * L::kTok;
    for (int i = tid; i < 8 * tiles(p); i += blockDim.x) {
      const int64_t e = entry(k0 + i < n ? k0 + i : k0);
      dst[i] = a.act + static_cast<size_t>((e / a.in_div) * a.in_mul + grp * a.in_gmul) * a.act_stride;
    }
  };
  auto load = [&](int s) {  // step s = (pass s / nkt, K tile s % nkt) into buffer s & 1
    const int p = s / nkt, kt = s - p * nkt, nt = tiles(p);
    uint8_t* sb = stages + (s & 1) * L::kStage;
    const uint8_t* const* xq = xp + (p & 1) * L::kTok;
    const int64_t b0 = static_cast<int64_t>(kt) * kBlk;
    if constexpr (L::kWBytes % 16 == 0) {
      constexpr int C = L::kWBytes / 16;
      for (int i = tid; i < L::kRows * C; i += blockDim.x) {
        const int row = i / C, c = i - row * C;
        cp_async16(sb + row * L::kWStride + 16 * c, wp[row] + b0 * B + 16 * c);
      }
    } else {  // 8-byte aligned tiles (Q2_K: kBlk * 84 bytes)
      constexpr int C = L::kWBytes / 8;
      for (int i = tid; i < L::kRows * C; i += blockDim.x) {
        const int row = i / C, c = i - row * C;
        cp_async8(sb + row * L::kWStride + 8 * c, wp[row] + b0 * B + 8 * c);
      }
    }
    if constexpr (Split<T>::kOn) {  // the tile's scale fields: after the row's nblk payloads
      for (int i = tid; i < L::kRows; i += blockDim.x) {
        if constexpr (L::kTail == 8) cp_async8(sb + L::kT + i * L::kTail, wp[i] + nblk * B + b0 * tail_bytes<T>());
        else cp_async4(sb + L::kT + i * L::kTail, wp[i] + nblk * B + b0 * tail_bytes<T>());
      }
    }
    if constexpr (L::kXBytes % 16 == 0) {
      constexpr int CX = L::kXBytes / 16;
      for (int i = tid; i < 8 * nt * CX; i += blockDim.x) {
        const int tok = i / CX, c = i - tok * CX;
        cp_async16(sb + L::kX + tok * L::kXStride + 16 * c, xq[tok] + b0 * kAct + 16 * c);
      }
    } else {  // 8-byte aligned tiles (kBlk * 292 bytes from a 16-byte aligned row)
      constexpr int CX = L::kXBytes / 8;
      for (int i = tid; i < 8 * nt * CX; i += blockDim.x) {
        const int tok = i / CX, c = i - tok * CX;
        cp_async8(sb + L::kX + tok * L::kXStride + 8 * c, xq[tok] + b0 * kAct + 8 * c);
      }
    }
    cp_async_commit();
  };
  fill(0);
  __syncthreads();  // wp, xp, the grid
  load(0);
  float acc[G][4];
#pragma unroll
  for (int j = 0; j < G; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int s = 0; s < nsteps; ++s) {
    const int p = s / nkt, kt = s - p * nkt, nt = tiles(p);
    if (kt == nkt - 1 && p + 1 < npass) {
      // The next step starts pass p + 1: its pointer buffer was last read when pass p - 1's
      // copies were issued, before an earlier step's closing barrier.
      fill(p + 1);
      __syncthreads();
    }
    if (s + 1 < nsteps) {
      load(s + 1);
      cp_async_wait_group<1>();
    } else {
      cp_async_wait_group<0>();
    }
    __syncthreads();
    const uint8_t* sb = stages + (s & 1) * L::kStage;
    if (live) {
      // A full pass (nt == G: most passes of the 2K profile's experts) gets its own copy of the
      // step with the tile count a constant, so its per-tile `j >= nt` tests vanish (SASS: ~2.5
      // of ~22.6 instructions per IMMA); partial passes take the general one.
      const uint8_t* ws = sb + (16 * warp + g) * L::kWStride;
      const uint8_t* tw = sb + L::kT + (16 * warp + g) * L::kTail;
      if (nt == G) sg_tile<T, G, L::kWStride, L::kTail, L::kXStride, kBlk>(ws, tw, sb + L::kX, G, g, t, tab, acc);
      else sg_tile<T, G, L::kWStride, L::kTail, L::kXStride, kBlk>(ws, tw, sb + L::kX, nt, g, t, tab, acc);
    }
    if (kt == nkt - 1) {  // pass p done: its outputs, then fresh accumulators
      if (live) {
#pragma unroll
        for (int j = 0; j < G; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t r = r0 + g + (i >= 2 ? 8 : 0);
            const int k = p * L::kTok + 8 * j + 2 * t + (i & 1);
            const float v = T == kIQ2_XXS ? 0.125f * acc[j][i] : acc[j][i];
            if (j < nt && r < a.n_rows && k < n) a.y[entry(k) * a.y_stride + grp * a.y_gstride + r] = v;
          }
      }
#pragma unroll
      for (int j = 0; j < G; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }
    __syncthreads();  // the buffer is refilled two steps on
  }
}

// Dense Q8_0 matmat in shared-memory tiles (no expert list; rows of whole 256-value K tiles,
// 16-byte aligned). A block of 8 warps computes 64 rows x 64 tokens; warp w takes rows
// 32 (w & 1) .. +31 and tokens 16 (w >> 1) .. +15: two 16-row A tiles x two 8-token B tiles,
// 4 m16n8k32 per 32-value block, 16 outputs per lane x 8 accumulators = 128 registers (a larger
// warp tile would pass 255). K tiles of 8 blocks are staged by cp.async in kStages buffers (3;
// 2 where a block gets less shared memory, e.g. 99 KiB on sm_86/89/120)
// (the first weight tiles before pdl_wait: weights are constant); staged rows are padded
// (+16 bytes, a stride of 4 mod 32 words) so ldmatrix's 8-row phases and the 32-bit activation
// reads hit distinct banks. A fragments by ldmatrix.x4, B fragments by 32-bit loads (the
// 36-byte activation blocks put the payload 4 bytes off the 16-byte alignment ldmatrix needs).
// Bit-identity: each MMA returns the exact isum_b of its (row, token) entries plus kQtBias fed in
// as the accumulator. |isum_b| <= 32 * 128 * 128 = 2^19 < 2^22, so that integer is the bit
// pattern of the float 12582912 + isum_b (in [2^23, 2^24), ulp 1) and subtracting 12582912
// gives (float)isum_b exactly, without I2F (a fraction of the FP32 rate). Block b0 + i of a tile (b0 a
// multiple of 8) goes to accumulator i = b mod 8 with matmat_mma_kernel's float steps (separate
// mul and add, --fmad=false) in block order, then the same final tree: bit-identical to matvec.
// Rows past n_rows read the last row, tokens past n_tok the last token; neither is stored.
constexpr int kQtRows = 64, kQtTok = 64, kQtBlk = 8, kQtThreads = 256;
constexpr int kQtWStride = kQtBlk * 32 + 16;  // staged payload bytes per row
constexpr int kQtXStride = kQtBlk * 36 + 16;  // staged activation bytes per token
constexpr int kQtBias = 0x4B400000;           // the float 12582912 = 1.5 * 2^23

struct QtStage {
  uint8_t w[kQtRows * kQtWStride];
  uint8_t d[kQtRows * 16];  // each row's 8 f16 block scales
  uint8_t x[kQtTok * kQtXStride];
};
// Dynamic shared memory of matmat_q8_tiled_kernel<stages>: 111 KiB for 3 stages, 74 KiB for 2.
constexpr size_t qt_smem_bytes(int stages) { return static_cast<size_t>(stages) * sizeof(QtStage); }
static_assert(sizeof(QtStage) % 16 == 0, "stages stay 16-byte aligned");

// mma m16n8k32 s8 with every accumulator input kQtBias (c = isum + kQtBias, exact in s32).
__device__ __forceinline__ void mma_s8_16x8x32_biased(const int (&a)[4], int b0, int b1, int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kQtBias));
#else
  c[0] = c[1] = c[2] = c[3] = kQtBias;  // not built below sm_80 (launch_matmat checks)
#endif
}

// Four 8x8 b16 matrices (8 rows of 16 bytes each) from shared memory: lane l gives the address of
// row l % 8 of matrix l / 8; register i of lane l receives bytes 4 (l % 4) .. +3 of row l / 4 of
// matrix i. With matrix i = rows 8 (i & 1) .., bytes 16 (i >> 1) .. of a 16 x 32-byte A tile that
// is a0..a3 of mma m16n8k32: (row g, bytes 4t..), (g + 8, 4t..), (g, 16 + 4t..), (g + 8, 16 + 4t..).
__device__ __forceinline__ void ldmatrix_x4(int (&r)[4], uint32_t addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

template <int kStages>
__global__ void __launch_bounds__(kQtThreads, 1) matmat_q8_tiled_kernel(MatmatArgs a) {
  extern __shared__ __align__(16) uint8_t qt_smem[];
  QtStage* st = reinterpret_cast<QtStage*>(qt_smem);
  const int grp = blockIdx.y;
  const int n = a.n_tok;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kQtRows;
  const int k0 = static_cast<int>(blockIdx.z) * kQtTok;
  if (k0 >= n || r0 >= a.n_rows) return;  // whole block, before touching any buffer
  const int64_t nblk = a.cols / 32;
  const int nkt = static_cast<int>(nblk / kQtBlk);
  const int tid = threadIdx.x;
  // Staging: thread tid copies row (and token) tid / 4, 16-byte chunks tid % 4 + 4 q.
  const int lr = tid >> 2, lc = tid & 3;
  const int64_t rr = r0 + lr < a.n_rows ? r0 + lr : a.n_rows - 1;
  const uint8_t* wsrc = a.w + static_cast<size_t>(a.row0 + grp * a.group_rows + rr) * a.row_bytes;
  const int64_t kk = k0 + lr < n ? k0 + lr : n - 1;
  const uint8_t* xsrc = a.act + static_cast<size_t>((kk / a.in_div) * a.in_mul + grp * a.in_gmul) * a.act_stride;
  auto load_w = [&](int kt) {  // 16 payload chunks + 1 scale chunk per row
    QtStage& sb = st[kt % kStages];
    const int64_t b0 = static_cast<int64_t>(kt) * kQtBlk;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int c = lc + 4 * q;
      cp_async16(sb.w + lr * kQtWStride + 16 * c, wsrc + b0 * 32 + 16 * c);
    }
    if (lc == 0) cp_async16(sb.d + lr * 16, wsrc + nblk * 32 + 2 * b0);
  };
  auto load_x = [&](int kt) {  // 8 blocks of 36 bytes = 18 chunks per token
    QtStage& sb = st[kt % kStages];
    const int64_t b0 = static_cast<int64_t>(kt) * kQtBlk;
#pragma unroll
    for (int q = 0; q < 5; ++q) {
      const int c = lc + 4 * q;
      if (c < 18) cp_async16(sb.x + lr * kQtXStride + 16 * c, xsrc + b0 * 36 + 16 * c);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < nkt) load_w(s);
  pdl_wait();
  pdl_trigger();
  // Group s holds stage s's activations (group 0 also the early weights): stage s is complete
  // once groups 0..s are.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkt) load_x(s);
    cp_async_commit();
  }

  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wr = warp & 1, wt = warp >> 1;
  // ldmatrix row address of this lane (see ldmatrix_x4) in the warp's first 16-row tile.
  const uint32_t a_lane = static_cast<uint32_t>(__cvta_generic_to_shared(qt_smem)) +
                          (32 * wr + (lane & 7) + 8 * ((lane >> 3) & 1)) * kQtWStride + 16 * (lane >> 4);
  const int d_lane = (32 * wr + g) * 16;                      // scales of row g (+8 rows: +128)
  const int xb_lane = (16 * wt + g) * kQtXStride + 4 + 4 * t;  // B: token g of tile 0, bytes 4t..
  const int xd_lane = (16 * wt + 2 * t) * kQtXStride;          // C: tokens 2t, 2t + 1 of tile 0

  float p[kQtBlk][2][2][4];  // [block mod 8][row tile][token tile][c index]
#pragma unroll
  for (int s = 0; s < kQtBlk; ++s)
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < 2; ++j) p[s][m][j][0] = p[s][m][j][1] = p[s][m][j][2] = p[s][m][j][3] = 0.0f;

  for (int kt = 0; kt < nkt; ++kt) {
    cp_async_wait_group<kStages - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt - 1 is no longer read
    if (kt + kStages - 1 < nkt) {
      load_w(kt + kStages - 1);
      load_x(kt + kStages - 1);
    }
    cp_async_commit();
    const int cur = kt % kStages;
    const QtStage& sb = st[cur];
    const uint32_t aw = a_lane + static_cast<uint32_t>(cur * sizeof(QtStage));
    int dw[2][2];  // f16 scales of blocks bi, bi + 1 of rows g + 16 m + 8 h
#pragma unroll
    for (int bi = 0; bi < kQtBlk; ++bi) {
      int af[2][4];
      ldmatrix_x4(af[0], aw + 32 * bi);
      ldmatrix_x4(af[1], aw + 16 * kQtWStride + 32 * bi);
      if ((bi & 1) == 0) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) dw[m][h] = ld32(sb.d + d_lane + (16 * m + 8 * h) * 16 + 2 * bi);
      }
      float dg[2][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) dg[m][h] = h2f(static_cast<uint16_t>(dw[m][h] >> (16 * (bi & 1))));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint8_t* xb = sb.x + xb_lane + 8 * j * kQtXStride + bi * 36;
        const int b0 = ld32(xb), b1 = ld32(xb + 16);
        const uint8_t* xd = sb.x + xd_lane + 8 * j * kQtXStride + bi * 36;
        const float xda = *reinterpret_cast<const float*>(xd);
        const float xdc = *reinterpret_cast<const float*>(xd + kQtXStride);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          int c[4];
          mma_s8_16x8x32_biased(af[m], b0, b1, c);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float isum = __int_as_float(c[i]) - 12582912.0f;  // exact (see above)
            const float s = dg[m][i >> 1] * ((i & 1) ? xdc : xda);
            p[bi][m][j][i] = p[bi][m][j][i] + s * isum;
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float out = ((p[0][m][j][i] + p[4][m][j][i]) + (p[2][m][j][i] + p[6][m][j][i])) +
                          ((p[1][m][j][i] + p[5][m][j][i]) + (p[3][m][j][i] + p[7][m][j][i]));
        const int64_t r = r0 + 32 * wr + 16 * m + g + 8 * (i >> 1);
        const int k = k0 + 16 * wt + 8 * j + 2 * t + (i & 1);
        if (r < a.n_rows && k < n) a.y[static_cast<int64_t>(k) * a.y_stride + grp * a.y_gstride + r] = out;
      }
}

// DS4_CUDA_FLOAT_TILED=0: dense float prefill matvecs through matmat_class_float_kernel instead of
// the shared-memory tiled one (comparisons).
bool float_tiled_off() {
  static const bool off = env_is_zero("DS4_CUDA_FLOAT_TILED");
  return off;
}

// DS4_CUDA_MATMAT_TILED=0: dense Q8_0 prefill matvecs through matmat_mma_kernel (comparisons).
bool tiled_off() {
  static const bool off = env_is_zero("DS4_CUDA_MATMAT_TILED");
  return off;
}

// DS4_CUDA_MATMAT_MMA=0: Q8_0 / IQ2_XXS / Q2_K / Q4_K prefill matvecs through the token-per-lane / generic kernels.
bool mma_off() {
  static const bool off = env_is_zero("DS4_CUDA_MATMAT_MMA");
  return off;
}

// DS4_CUDA_MATMAT_STAGED=0: expert-list IQ2_XXS / Q2_K / Q4_K prefill matvecs through
// matmat_mma_kernel's direct fragment loads instead of the staged matmat_predecode_kernel.
bool staged_off() {
  static const bool off = env_is_zero("DS4_CUDA_MATMAT_STAGED");
  return off;
}

// IQ2_XXS and Q2_K predecode K tiles: 2 blocks per stage by default (half the shared memory of
// 4, so two blocks share an SM: 4 warps per scheduler instead of 2, where ncu put 40 % of the
// 4-block kernel's stalls on fixed-latency dependencies), 128-row blocks with 6 token tiles.
// H200, 2K prefill: 2356 -> 2485 tok/s, experts' down 2351 -> 1945 us per call, gate/up 2020 ->
// 1710 (perf-notes, tenth pass). DS4_CUDA_PREDECODE_KTILE=3: 96-row blocks with 8 tiles (2410
// tok/s); =4: the 4-block tiles, shaped by DS4_CUDA_MATMAT_PREDECODE (comparisons).
int predecode_ktile() {
  static const int n = [] {
    const char* v = std::getenv("DS4_CUDA_PREDECODE_KTILE");
    return v && (v[0] == '3' || v[0] == '4') ? v[0] - '0' : 2;
  }();
  return n;
}

// DS4_CUDA_PREDECODE_SPLIT=1 (with the default K tiles of 2 blocks, IQ2_XXS and Q2_K): the
// experts with 49..64 tokens go to a launch of 8 token tiles per pass at 6 warps (KTILE=3's
// shape), which decodes their weights once, and the others to the default shape (6 tiles at
// 8 warps), which takes two passes, so two decodes, for 49..96 tokens. With ~48 tokens per
// expert at 2048-token chunks (the synthetic model's routing), ~47 % of the experts are in
// 49..64. Off until measured on a device (staged in session 41, which had none).
bool predecode_split() {
  static const bool on = env_is_on("DS4_CUDA_PREDECODE_SPLIT");
  return on;
}

// matmat_predecode_kernel's shape under DS4_CUDA_PREDECODE_KTILE=4: 128-row
// blocks (1 block per SM), IQ2_XXS with 8 token tiles
// per pass (64 tokens, 220 KB, 124 registers; +1 % prefill over 6 tiles in three runs:
// perf-notes, ninth pass), Q2_K with 6 (8 would not fit). DS4_CUDA_MATMAT_PREDECODE=2: IQ2_XXS
// with 6 tiles too; =1: 64-row blocks (2 blocks per SM: IQ2_XXS 4 tiles, Q2_K 3). Q4_K takes
// 64 rows x 2 tiles in all (comparisons).
int predecode_mode() {
  static const int mode = [] {
    const char* v = std::getenv("DS4_CUDA_MATMAT_PREDECODE");
    return v && (v[0] == '1' || v[0] == '2') ? v[0] - '0' : 3;
  }();
  return mode;
}

// Whether matmat_predecode_kernel's shape <T, kG, kW, kBlk> fits the device's shared memory.
template <uint32_t T, int kG, int kW, int kBlk = kSgBlk>
bool predecode_fits() {
  return Pd<T, kG, kW, kBlk>::kSmem <= smem_limit();
}

template <uint32_t T, int kG, int kW, int kBlk = kSgBlk, int kMinBlocks = 0>
bool launch_predecode(const MatmatArgs& a, int groups) {
  using L = Pd<T, kG, kW, kBlk>;
  if (!predecode_fits<T, kG, kW, kBlk>()) return false;
  auto* k = matmat_predecode_kernel<T, kG, kW, kBlk, kMinBlocks>;
  allow_dynamic_smem(reinterpret_cast<const void*>(k), L::kSmem);
  cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  const dim3 grid(static_cast<unsigned>((a.n_rows + L::kRows - 1) / L::kRows), static_cast<unsigned>(groups));
  launch_k(k, grid, kW * 32, L::kSmem, a);
  return true;
}

// Compute capability >= 8.0 on the current device (integer mma.sync).
bool has_int8_mma() { return cc_major() >= 8; }

template <uint32_t T>
void launch_matmat(const MatmatArgs& a, int groups) {
  if constexpr (T == kF32 || T == kF16 || T == kBF16) {
    if (!lane_matmat_off() && a.cols % 16 == 0) {
      if (!float_tiled_off() && !a.cnt && !a.list && a.row_bytes % 16 == 0 &&
          reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && reinterpret_cast<uintptr_t>(a.act) % 16 == 0 &&
          a.act_stride % 16 == 0) {
        const int64_t tiles = std::min<int64_t>((a.n_tok + kFtTok - 1) / kFtTok, 65535);
        const dim3 grid(static_cast<unsigned>((a.n_rows + kFtRows - 1) / kFtRows), static_cast<unsigned>(groups),
                        static_cast<unsigned>(tiles));
        launch_k(matmat_float_tiled_kernel<T>, grid, kFtThreads, 0, a);
        return;
      }
      // Token tiles over grid.z for dense launches (expert lists: every group's tokens in one block).
      const int64_t tiles = a.cnt ? 1 : std::min<int64_t>((a.n_tok + kCfBlockTok - 1) / kCfBlockTok, 65535);
      const dim3 grid(static_cast<unsigned>((a.n_rows + kCfBlockRows - 1) / kCfBlockRows), static_cast<unsigned>(groups),
                      static_cast<unsigned>(tiles));
      launch_k(matmat_class_float_kernel<T>, grid, kCfWarps * 32, 0, a);
      return;
    }
  }
  if constexpr (T == kQ8_0 || T == kIQ2_XXS || T == kQ2_K || T == kQ4_K) {
    constexpr size_t kAlign = T == kIQ2_XXS ? 8 : 4;  // payload words read 8 (IQ2_XXS) or 4 bytes at a time
    if constexpr (T == kQ8_0) {
      if (!tiled_off() && !mma_off() && !lane_matmat_off() && !a.cnt && !a.list && a.cols % 256 == 0 &&
          a.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.act_stride % 16 == 0 &&
          reinterpret_cast<uintptr_t>(a.act) % 16 == 0 && has_int8_mma() && qt_smem_bytes(2) <= smem_limit()) {
        const dim3 grid(static_cast<unsigned>((a.n_rows + kQtRows - 1) / kQtRows), static_cast<unsigned>(groups),
                        static_cast<unsigned>((a.n_tok + kQtTok - 1) / kQtTok));
        const int stages = qt_smem_bytes(3) <= smem_limit() ? 3 : 2;
        auto* k = stages == 3 ? matmat_q8_tiled_kernel<3> : matmat_q8_tiled_kernel<2>;
        allow_dynamic_smem(reinterpret_cast<const void*>(k), qt_smem_bytes(stages));
        launch_k(k, grid, kQtThreads, qt_smem_bytes(stages), a);
        return;
      }
    }
    if (!mma_off() && !lane_matmat_off() && a.row_bytes % kAlign == 0 && reinterpret_cast<uintptr_t>(a.w) % kAlign == 0 &&
        a.act_stride % 4 == 0 && has_int8_mma()) {
      if constexpr (T == kIQ2_XXS || T == kQ2_K || T == kQ4_K) {
        // Whole K tiles only (see kSgBlk); 16-byte aligned rows, payloads and activation rows
        // for the 16-byte copies.
        if (a.cnt && !staged_off() && a.cols % (kSgBlk * Fmt<T>::kVals) == 0 && a.row_bytes % 16 == 0 &&
            reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.act_stride % 16 == 0 &&
            reinterpret_cast<uintptr_t>(a.act) % 16 == 0) {
          const int pmode = predecode_mode();
          const int ktile = predecode_ktile();
          // Each shape launches only if its shared memory fits the device (launch_predecode);
          // on one with less (99 KiB per block: sm_86, sm_89, sm_120) the next is tried: the
          // 64-row shape, then 64 rows with K tiles of 2 blocks, then matmat_mma_kernel below.
          if constexpr (T == kIQ2_XXS || T == kQ2_K) {
            // Both shapes or neither: the split's launches share the experts between them.
            if (ktile == 2 && predecode_split() && predecode_fits<T, 6, 8, 2>() && predecode_fits<T, 8, 6, 2>()) {
              MatmatArgs few = a, many = a;
              few.cls_lo = many.cls_lo = Pd<T, 6, 8, 2>::kTok;
              few.cls_hi = many.cls_hi = Pd<T, 8, 6, 2>::kTok;
              many.cls_in = true;
              launch_predecode<T, 6, 8, 2, 2>(few, groups);
              launch_predecode<T, 8, 6, 2, 2>(many, groups);
              return;
            }
            if (ktile == 2 && launch_predecode<T, 6, 8, 2, 2>(a, groups)) return;
            if (ktile == 3 && launch_predecode<T, 8, 6, 2, 2>(a, groups)) return;
            if (ktile == 4 && pmode == 3 && launch_predecode<T, T == kIQ2_XXS ? 8 : 6, 8>(a, groups)) return;
            if (ktile == 4 && pmode == 2 && launch_predecode<T, 6, 8>(a, groups)) return;
            if (launch_predecode<T, T == kIQ2_XXS ? 4 : 3, 4>(a, groups)) return;  // and pmode 1
          } else {
            if (launch_predecode<T, 2, 4>(a, groups)) return;
          }
          if (launch_predecode<T, T == kQ4_K ? 2 : 6, 4, 2>(a, groups)) return;
        }
      }
      const int64_t rows_per_block = a.cnt ? 16 * kMqWarps : 16;  // as matmat_mma_kernel
      const dim3 grid(static_cast<unsigned>((a.n_rows + rows_per_block - 1) / rows_per_block),
                      static_cast<unsigned>(groups));
      launch_k(matmat_mma_kernel<T>, grid, kMqWarps * 32, 0, a);
      return;
    }
  }
  if constexpr (T == kQ8_0 || T == kMXFP4) {
    if (!lane_matmat_off()) {
      const dim3 grid(static_cast<unsigned>((a.n_rows + kLnWarps - 1) / kLnWarps), static_cast<unsigned>(groups));
      launch_k(matmat_lane_kernel<T>, grid, kLnWarps * 32, 0, a);
      return;
    }
  }
  const bool vec = reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.row_bytes % 16 == 0;
  const dim3 grid(static_cast<unsigned>((a.n_rows + kMmWarps - 1) / kMmWarps), static_cast<unsigned>(groups));
  auto* k = vec ? matmat_kernel<T, true> : matmat_kernel<T, false>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMmSmem));
  launch_k(k, grid, kMmWarps * 32, kMmSmem, a);
}

}  // namespace

void quantize_rows(uint32_t type, const float* x, int64_t x_stride, int64_t cols, int n_rows, uint8_t* act) {
  const ActFormat at = act_of(type);
  if (at == ActFormat::F32 || at == ActFormat::Bad || n_rows <= 0) return;
  quantize_src(at, RowSrc{x, x_stride}, cols, n_rows, act, act_row_bytes(type, cols));
}

void matmat(const MatmatOp& op) {
  const DevMatrix& w = *op.w;
  if (op.n_rows <= 0 || op.groups <= 0 || op.n_in <= 0 || (!op.cnt && op.n_tok <= 0)) return;
  const ActFormat at = act_of(w.type);
  MatmatArgs a{w.data, w.row_bytes, w.cols, op.n_rows, op.row0, op.group_rows, op.n_tok, op.cnt, op.list,
               op.list_stride, op.in_div, op.in_mul, op.in_gmul, nullptr, 0, op.y, op.y_stride, op.y_gstride};
  if (at == ActFormat::F32) {
    a.act = reinterpret_cast<const uint8_t*>(op.x);
    a.act_stride = static_cast<size_t>(op.x_stride) * 4;
  } else {
    if (!op.act_ready) quantize_rows(w.type, op.x, op.x_stride, w.cols, op.n_in, op.act);
    a.act = op.act;
    a.act_stride = act_row_bytes(w.type, w.cols);
  }
  switch (w.type) {
    case kF32: launch_matmat<kF32>(a, op.groups); break;
    case kF16: launch_matmat<kF16>(a, op.groups); break;
    case kBF16: launch_matmat<kBF16>(a, op.groups); break;
    case kQ8_0: launch_matmat<kQ8_0>(a, op.groups); break;
    case kMXFP4: launch_matmat<kMXFP4>(a, op.groups); break;
    case kQ2_K: launch_matmat<kQ2_K>(a, op.groups); break;
    case kQ4_K: launch_matmat<kQ4_K>(a, op.groups); break;
    case kIQ2_XXS: launch_matmat<kIQ2_XXS>(a, op.groups); break;
    default: break;  // rejected by the host side before upload
  }
}

namespace {

// One block: cnt[e] = number of entries i with sel[i] == e, list[e*stride + k] = those i (in
// any order: every entry is computed independently). cnt must be zero on entry.
__global__ void group_by_expert_kernel(const int32_t* sel, int n, int n_expert, int32_t* cnt, int32_t* list,
                                       int64_t stride) {
  pdl_wait();
  pdl_trigger();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = sel[i];
    if (e < 0 || e >= n_expert) continue;
    const int k = atomicAdd(&cnt[e], 1);
    list[e * stride + k] = i;
  }
}

}  // namespace

void group_by_expert(const int32_t* sel, int n, int n_expert, int32_t* cnt, int32_t* list, int64_t stride) {
  cudaMemsetAsync(cnt, 0, static_cast<size_t>(n_expert) * sizeof(int32_t), launch_stream());
  launch_k(group_by_expert_kernel, 1, 256, 0, sel, n, n_expert, cnt, list, stride);
}

}  // namespace ds4::cuda
