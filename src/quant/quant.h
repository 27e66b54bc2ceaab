// ds4::quant — the entry header the rest of the engine includes: block formats of spec §5
// (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, MXFP4, and the Q8_K activation format),
// dequantization, reference quantizers, activation quantizers (spec §3.1, §5.6), dot products
// of one weight row against a quantized activation, and a row-parallel matvec.
//
// Shapes: a weight tensor [cols, rows] (GGUF order, cols innermost) is `rows` consecutive rows
// of row_bytes(type, cols) bytes each; an expert-major 3-D tensor [cols, rows, experts] is just
// rows * experts consecutive rows. Pointers to block data must be aligned to the block
// struct's alignment (2 bytes for f16-scaled weight blocks, 4 for F32/Q8_K/activation blocks);
// GGUF tensor data satisfies this.
//
// Kernels exist as a scalar reference and as AVX2 (+FMA, F16C) and AVX-512 (F/BW/VL/DQ/VNNI)
// versions picked at run time (see isa.h). For every format the SIMD results are bit-identical
// to the scalar reference, because all kernels follow one fixed summation order (documented
// at vec_dot below). The one exception is NaN payloads: F16C widening quiets a signalling f16
// NaN that the scalar widening passes through.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/ggml_type.h"
#include "quant/blocks.h"
#include "quant/isa.h"

namespace ds4::quant {

/// The activation format a weight row is multiplied with (spec §3.1, §7 item 3).
enum class ActType {
  F32,   ///< plain floats (F32/F16/BF16 weights)
  Q8_0,  ///< BlockQ8_0Act: 32-element blocks, f32 d (Q8_0 and MXFP4 weights)
  Q8_K,  ///< BlockQ8_K: 256-element blocks, f32 d, bsums (Q2_K, Q4_K, IQ2_XXS weights)
};

/// Name of an activation format for messages ("F32", "Q8_0", "Q8_K").
const char* act_type_name(ActType type);

/// True for the types this module can dequantize/quantize: F32, F16, BF16, Q8_0, Q2_K, Q4_K,
/// Q8_K, IQ2_XXS, MXFP4.
bool is_supported(GgmlType type);

/// True for the supported types that can be a weight row in vec_dot/matvec (all of the above
/// except Q8_K, which is activation-only).
bool is_weight_type(GgmlType type);

/// The activation format used with weights of `weight_type`: F32/F16/BF16 -> F32,
/// Q8_0/MXFP4 -> Q8_0, Q2_K/Q4_K/IQ2_XXS -> Q8_K. Throws ds4::Error for other types.
ActType activation_type(GgmlType weight_type);

/// Bytes of a row of `n` elements of `type`. Throws ds4::Error if the type is not supported,
/// n < 0, or n is not a multiple of the type's block size.
size_t row_bytes(GgmlType type, int64_t n);

/// Bytes of an activation row of `n` elements in format `type` (F32: 4n; Q8_0: 36 per 32;
/// Q8_K: 292 per 256). Throws ds4::Error if n < 0 or not a multiple of the block size.
size_t act_row_bytes(ActType type, int64_t n);

/// Decodes `n` elements of `type` (any supported type, Q8_K included) from `src` into
/// dst[0..n) (f32). Exact: every element is computed with the spec §5 formula in f32
/// (e.g. Q2_K: (f16(d)*sc)*q - f16(dmin)*mn). Throws ds4::Error for an unsupported type or a
/// bad n (see row_bytes).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

/// Encodes src[0..n) into row_bytes(type, n) bytes at `dst` with the reference quantizer of
/// `type`:
/// - F32 copies, F16/BF16 round to nearest even (IEEE overflow to inf, spec §5.1);
/// - Q8_0: d = max|x|/127 stored as f16, q = round-half-away(x * (1/d)) with the unrounded d
///   (spec §5.2, gguf-tools quants.c:341);
/// - Q2_K/Q4_K: per sub-block least-squares scale/min search, scales quantized against f16
///   super-scales (k_quant.h);
/// - IQ2_XXS: nearest-grid-point search per group of 8 with sign-parity fix-up and a per
///   sub-block scale search (iq2_xxs.h);
/// - MXFP4: E8M0 exponent chosen between the two candidates around max|x|/6, nearest E2M1 code;
/// - Q8_K: the activation quantizer quantize_row_q8_K.
/// Values beyond the format's range saturate (f16 scales are clamped to 65504). Throws
/// ds4::Error for an unsupported type, a bad n, or (quantized formats except Q8_K) a
/// non-finite input element.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

/// Quantizes an activation row into Q8_0-style blocks (spec §3.1, ds4 `quantize_q8_0_activation`):
/// per block of 32, d = max|x|/127 (f32, kept unrounded), q = clamp(round_half_even(x * (1/d)),
/// -128, 127), q = 0 when d = 0. Deviation for degenerate input: when 1/d overflows
/// (max|x| < 127/FLT_MAX, about 3.7e-37) the block is stored as zero (d = 0, q = 0); ds4's
/// code gives meaningless codes there. Non-finite inputs give unspecified (but ISA-independent)
/// codes. n must be a multiple of 32 (throws ds4::Error otherwise); y holds n/32 blocks.
void quantize_row_q8_0(const float* x, BlockQ8_0Act* y, int64_t n);

/// Quantizes an activation row into Q8_K blocks (spec §5.6, ds4 `ds4_quantize_row_q8_K`): per
/// block of 256, max = the signed element with the largest |x| (first one on ties),
/// iscale = -127/max, q = clamp(round_half_even(iscale * x), -128, 127), d = 1/iscale,
/// bsums[j] = sum of q[16j..16j+15]; an all-zero block gives d = 0, q = 0, bsums = 0, and so
/// does a block whose iscale overflows (|max| < 127/FLT_MAX). n must be a multiple of 256
/// (throws ds4::Error otherwise); y holds n/256 blocks.
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

/// Quantizes x[0..n) into `dst` in activation format `type` (F32 copies). Throws like the
/// format's quantizer.
void quantize_activation(ActType type, const float* x, void* dst, int64_t n);

/// Dot product of one weight row of `n` elements (type `weight_type`) with an activation row in
/// activation_type(weight_type) format (`act`: const float* for F32/F16/BF16 weights, else the
/// quantized blocks from quantize_activation). Summation order, identical on every ISA:
/// - F32/F16/BF16: 16 interleaved f32 partial sums (element i into lane i mod 16, product
///   rounded then added, no FMA), combined by the tree (l, l+8), (l, l+4), (l, l+2), (0, 1);
/// - Q8_0/MXFP4: per block s_b = (scale_w * d_x) * (float)isum_b with the exact integer isum_b,
///   8 partial sums (block b into lane b mod 8), combined by the tree (l, l+4), (l, l+2), (0, 1);
///   scale_w is f16(d) for Q8_0 and 2^(e-128) (doubled E2M1 codes) for MXFP4;
/// - Q2_K/Q4_K: per block sum += (d_x*f16(d))*(float)isum - (d_x*f16(dmin))*(float)summs, in
///   block order (ds4 `ds4_vec_dot_q2_K_q8_K`);
/// - IQ2_XXS: per block sum += (f16(d)*d_x)*(float)bsum, result 0.125f*sum (ds4
///   `ds4_vec_dot_iq2_xxs_q8_K`).
/// Activation codes must lie in [-127, 127] (what the quantizers produce). Throws ds4::Error if
/// the type is not a weight type or n is not a multiple of its block size.
float vec_dot(GgmlType weight_type, const void* w, const void* act, int64_t n);

/// y[o] = vec_dot(row o of w, x) for o in [0, rows): w holds `rows` rows of `cols` elements of
/// `weight_type` (GGUF shape [cols, rows], or [cols, rows/E, E] expert-major); x is f32 [cols],
/// quantized once to activation_type(weight_type); y is f32 [rows]. threads > 1 splits the rows
/// statically over that many threads of parallel::pool() (never more threads than rows / 16). Throws
/// ds4::Error for a non-weight type, bad cols (see row_bytes), rows < 0 or threads < 1.
void matvec(GgmlType weight_type, const void* w, int64_t rows, int64_t cols, const float* x,
            float* y, int threads = 1);

/// Like matvec with an activation already quantized by quantize_activation(
/// activation_type(weight_type), x, act, cols) — lets several weight matrices (e.g. routed
/// experts) share one quantized input.
void matvec_act(GgmlType weight_type, const void* w, int64_t rows, int64_t cols, const void* act,
                float* y, int threads = 1);

}  // namespace ds4::quant
