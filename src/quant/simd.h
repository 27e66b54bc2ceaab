// Internal: declarations of the AVX2 (*_avx2.cpp) and AVX-512 (*_avx512.cpp) kernels. Only
// callable when isa_supported() says so. Each matches its ref:: counterpart bit for bit.
#pragma once

#include <cstdint>

namespace ds4::quant::avx2 {
float dot_f32(const void* w, const void* x, int64_t n);
float dot_f16(const void* w, const void* x, int64_t n);
float dot_bf16(const void* w, const void* x, int64_t n);
float dot_q8_0(const void* w, const void* act, int64_t n);
float dot_q2_k(const void* w, const void* act, int64_t n);
float dot_q4_k(const void* w, const void* act, int64_t n);
float dot_iq2_xxs(const void* w, const void* act, int64_t n);
float dot_mxfp4(const void* w, const void* act, int64_t n);
void dequant_f16(const void* src, float* dst, int64_t n);
void dequant_bf16(const void* src, float* dst, int64_t n);
void dequant_q8_0(const void* src, float* dst, int64_t n);
void dequant_q2_k(const void* src, float* dst, int64_t n);
void dequant_q4_k(const void* src, float* dst, int64_t n);
void dequant_iq2_xxs(const void* src, float* dst, int64_t n);
void quantize_q8_0_act(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);
}  // namespace ds4::quant::avx2

namespace ds4::quant::avx512 {
float dot_f32(const void* w, const void* x, int64_t n);
float dot_f16(const void* w, const void* x, int64_t n);
float dot_bf16(const void* w, const void* x, int64_t n);
float dot_q8_0(const void* w, const void* act, int64_t n);
float dot_q2_k(const void* w, const void* act, int64_t n);
float dot_q4_k(const void* w, const void* act, int64_t n);
float dot_iq2_xxs(const void* w, const void* act, int64_t n);
float dot_mxfp4(const void* w, const void* act, int64_t n);
void dequant_f16(const void* src, float* dst, int64_t n);
void dequant_bf16(const void* src, float* dst, int64_t n);
void dequant_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0_act(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);
}  // namespace ds4::quant::avx512
