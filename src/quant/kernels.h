// Internal: the per-ISA kernel table behind quant.h. Each kernel takes already validated sizes
// (n a multiple of the block size, n >= 0) and raw pointers. Every ISA's kernel must produce
// bit-identical results to the scalar reference (`ref::`), following the summation orders
// documented at quant::vec_dot.
#pragma once

#include <cstdint>

#include "common/ggml_type.h"

#include "quant/isa.h"

namespace ds4::quant::detail {

/// Dot product of one weight row (n elements) with an activation row.
using DotFn = float (*)(const void* w, const void* act, int64_t n);
/// Decodes n elements from src to f32.
using DequantFn = void (*)(const void* src, float* dst, int64_t n);
/// Quantizes n f32 activations into blocks at dst.
using ActQuantFn = void (*)(const float* x, void* dst, int64_t n);

struct Kernels {
  DotFn dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q2_k, dot_q4_k, dot_iq2_xxs, dot_mxfp4;
  DequantFn dequant_f16, dequant_bf16, dequant_q8_0, dequant_q2_k, dequant_q4_k,
      dequant_iq2_xxs, dequant_mxfp4, dequant_q8_k;
  ActQuantFn quantize_q8_0_act, quantize_q8_k;
};

/// The kernel table of `isa` (callers must check isa_supported first).
const Kernels& kernels_for(Isa isa);

/// The table of the active ISA (throws like active_isa()).
const Kernels& active_kernels();

/// The dot kernel of `k` for weight type `type`, or nullptr for a type that is not a weight type.
DotFn dot_kernel(const Kernels& k, ds4::GgmlType type);

}  // namespace ds4::quant::detail
