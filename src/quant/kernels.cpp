// The kernel tables of each ISA. Formats without a dedicated kernel for an ISA use the best
// lower one (e.g. AVX-512 reuses the AVX2 dequantizers of the K-quants); MXFP4 and Q8_K
// dequantization are scalar only (not on a hot path).
#include "quant/kernels.h"

#include "quant/reference.h"
#include "quant/simd.h"

namespace ds4::quant::detail {

namespace {

constexpr Kernels kScalar = {
    ref::dot_f32,        ref::dot_f16,        ref::dot_bf16,       ref::dot_q8_0,
    ref::dot_q2_k,       ref::dot_q4_k,       ref::dot_iq2_xxs,    ref::dot_mxfp4,
    ref::dequant_f16,    ref::dequant_bf16,   ref::dequant_q8_0,   ref::dequant_q2_k,
    ref::dequant_q4_k,   ref::dequant_iq2_xxs, ref::dequant_mxfp4, ref::dequant_q8_k,
    ref::quantize_q8_0_act, ref::quantize_q8_k,
};

constexpr Kernels kAvx2 = {
    avx2::dot_f32,        avx2::dot_f16,        avx2::dot_bf16,       avx2::dot_q8_0,
    avx2::dot_q2_k,       avx2::dot_q4_k,       avx2::dot_iq2_xxs,    avx2::dot_mxfp4,
    avx2::dequant_f16,    avx2::dequant_bf16,   avx2::dequant_q8_0,   avx2::dequant_q2_k,
    avx2::dequant_q4_k,   avx2::dequant_iq2_xxs, ref::dequant_mxfp4,  ref::dequant_q8_k,
    avx2::quantize_q8_0_act, avx2::quantize_q8_k,
};

constexpr Kernels kAvx512 = {
    avx512::dot_f32,      avx512::dot_f16,      avx512::dot_bf16,     avx512::dot_q8_0,
    avx512::dot_q2_k,     avx512::dot_q4_k,     avx512::dot_iq2_xxs,  avx512::dot_mxfp4,
    avx512::dequant_f16,  avx512::dequant_bf16, avx512::dequant_q8_0, avx2::dequant_q2_k,
    avx2::dequant_q4_k,   avx2::dequant_iq2_xxs, ref::dequant_mxfp4,  ref::dequant_q8_k,
    avx512::quantize_q8_0_act, avx512::quantize_q8_k,
};

}  // namespace

const Kernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx2: return kAvx2;
    case Isa::Avx512: return kAvx512;
    case Isa::Scalar: break;
  }
  return kScalar;
}

const Kernels& active_kernels() { return kernels_for(active_isa()); }

}  // namespace ds4::quant::detail
