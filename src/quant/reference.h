// Internal: scalar reference kernels (the definition of every result; SIMD kernels must match
// them bit for bit) and reference quantizers. Sizes are validated by the caller.
#pragma once

#include <cstdint>

namespace ds4::quant::ref {

// Plain float rows (float_rows.cpp).
float dot_f32(const void* w, const void* x, int64_t n);
float dot_f16(const void* w, const void* x, int64_t n);
float dot_bf16(const void* w, const void* x, int64_t n);
void dequant_f16(const void* src, float* dst, int64_t n);
void dequant_bf16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);

// Q8_0 weights and Q8_0-style activations (q8_0.cpp).
float dot_q8_0(const void* w, const void* act, int64_t n);
void dequant_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_0_act(const float* x, void* dst, int64_t n);

// Q8_K activations (q8_k.cpp).
void quantize_q8_k(const float* x, void* dst, int64_t n);
void dequant_q8_k(const void* src, float* dst, int64_t n);

// Q2_K (q2_k.cpp).
float dot_q2_k(const void* w, const void* act, int64_t n);
void dequant_q2_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);

// Q4_K (q4_k.cpp).
float dot_q4_k(const void* w, const void* act, int64_t n);
void dequant_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);

// IQ2_XXS (iq2_xxs.cpp, iq2_xxs_quantize.cpp).
float dot_iq2_xxs(const void* w, const void* act, int64_t n);
void dequant_iq2_xxs(const void* src, float* dst, int64_t n);
void quantize_iq2_xxs(const float* src, void* dst, int64_t n);

// MXFP4 (mxfp4.cpp).
float dot_mxfp4(const void* w, const void* act, int64_t n);
void dequant_mxfp4(const void* src, float* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);

}  // namespace ds4::quant::ref
