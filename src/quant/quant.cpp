// Public entry points of ds4::quant: validation, then dispatch to the active ISA's kernels.
#include "quant/quant.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "quant/kernels.h"
#include "quant/reference.h"

namespace ds4::quant {

namespace {

using detail::Kernels;

uint32_t block_elems(GgmlType type) { return ggml_type_info(static_cast<uint32_t>(type))->block_elems; }

void require_supported(GgmlType type, const char* what) {
  if (!is_supported(type)) {
    fail("{}: tensor type {} is not supported by ds4::quant", what, ggml_type_name(type));
  }
}

void require_weight(GgmlType type, const char* what) {
  if (!is_weight_type(type)) {
    fail("{}: {} cannot be a weight row (supported: F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, "
         "MXFP4)",
         what, ggml_type_name(type));
  }
}

void require_length(int64_t n, uint32_t block, const char* what, const std::string& type_name) {
  if (n < 0) fail("{}: negative element count {} for {}", what, n, type_name);
  if (n % block != 0) {
    fail("{}: {} elements of {} is not a multiple of its block size {}", what, n, type_name, block);
  }
}

uint32_t act_block_elems(ActType type) {
  switch (type) {
    case ActType::F32: return 1;
    case ActType::Q8_0: return kQK8_0;
    case ActType::Q8_K: return kQK_K;
  }
  return 1;
}

uint32_t act_block_bytes(ActType type) {
  switch (type) {
    case ActType::F32: return 4;
    case ActType::Q8_0: return sizeof(BlockQ8_0Act);
    case ActType::Q8_K: return sizeof(BlockQ8_K);
  }
  return 4;
}


}  // namespace

const char* act_type_name(ActType type) {
  switch (type) {
    case ActType::F32: return "F32";
    case ActType::Q8_0: return "Q8_0";
    case ActType::Q8_K: return "Q8_K";
  }
  return "unknown";
}

bool is_supported(GgmlType type) { return is_weight_type(type) || type == GgmlType::Q8_K; }

bool is_weight_type(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::IQ2_XXS: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

ActType activation_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return ActType::F32;
    case GgmlType::Q8_0: case GgmlType::MXFP4: return ActType::Q8_0;
    case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::IQ2_XXS: return ActType::Q8_K;
    default: break;
  }
  require_weight(weight_type, "activation_type");
  return ActType::F32;  // unreachable
}

size_t row_bytes(GgmlType type, int64_t n) {
  require_supported(type, "row_bytes");
  const auto info = *ggml_type_info(static_cast<uint32_t>(type));
  require_length(n, info.block_elems, "row_bytes", ggml_type_name(type));
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

size_t act_row_bytes(ActType type, int64_t n) {
  require_length(n, act_block_elems(type), "act_row_bytes", act_type_name(type));
  return static_cast<size_t>(n / act_block_elems(type)) * act_block_bytes(type);
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  require_supported(type, "dequantize_row");
  require_length(n, block_elems(type), "dequantize_row", ggml_type_name(type));
  const Kernels& k = detail::active_kernels();
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: k.dequant_f16(src, dst, n); return;
    case GgmlType::BF16: k.dequant_bf16(src, dst, n); return;
    case GgmlType::Q8_0: k.dequant_q8_0(src, dst, n); return;
    case GgmlType::Q2_K: k.dequant_q2_k(src, dst, n); return;
    case GgmlType::Q4_K: k.dequant_q4_k(src, dst, n); return;
    case GgmlType::IQ2_XXS: k.dequant_iq2_xxs(src, dst, n); return;
    case GgmlType::MXFP4: k.dequant_mxfp4(src, dst, n); return;
    case GgmlType::Q8_K: k.dequant_q8_k(src, dst, n); return;
    default: return;  // rejected by require_supported
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  require_supported(type, "quantize_row");
  require_length(n, block_elems(type), "quantize_row", ggml_type_name(type));
  const bool plain = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
  if (!plain && type != GgmlType::Q8_K) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(src[i])) {
        fail("quantize_row({}): element {} is {} (only finite values can be quantized)",
             ggml_type_name(type), i, src[i]);
      }
    }
  }
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: ref::quantize_f16(src, dst, n); return;
    case GgmlType::BF16: ref::quantize_bf16(src, dst, n); return;
    case GgmlType::Q8_0: ref::quantize_q8_0(src, dst, n); return;
    case GgmlType::Q2_K: ref::quantize_q2_k(src, dst, n); return;
    case GgmlType::Q4_K: ref::quantize_q4_k(src, dst, n); return;
    case GgmlType::IQ2_XXS: ref::quantize_iq2_xxs(src, dst, n); return;
    case GgmlType::MXFP4: ref::quantize_mxfp4(src, dst, n); return;
    case GgmlType::Q8_K: quantize_row_q8_K(src, static_cast<BlockQ8_K*>(dst), n); return;
    default: return;  // rejected by require_supported
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0Act* y, int64_t n) {
  require_length(n, kQK8_0, "quantize_row_q8_0", "Q8_0 activations");
  detail::active_kernels().quantize_q8_0_act(x, y, n);
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  require_length(n, kQK_K, "quantize_row_q8_K", "Q8_K");
  detail::active_kernels().quantize_q8_k(x, y, n);
}

void quantize_activation(ActType type, const float* x, void* dst, int64_t n) {
  switch (type) {
    case ActType::F32:
      require_length(n, 1, "quantize_activation", "F32");
      std::memcpy(dst, x, static_cast<size_t>(n) * 4);
      return;
    case ActType::Q8_0: quantize_row_q8_0(x, static_cast<BlockQ8_0Act*>(dst), n); return;
    case ActType::Q8_K: quantize_row_q8_K(x, static_cast<BlockQ8_K*>(dst), n); return;
  }
}

float vec_dot(GgmlType weight_type, const void* w, const void* act, int64_t n) {
  require_weight(weight_type, "vec_dot");
  require_length(n, block_elems(weight_type), "vec_dot", ggml_type_name(weight_type));
  return detail::dot_kernel(detail::active_kernels(), weight_type)(w, act, n);
}

namespace detail {

DotFn dot_kernel(const Kernels& k, GgmlType type) {
  switch (type) {
    case GgmlType::F32: return k.dot_f32;
    case GgmlType::F16: return k.dot_f16;
    case GgmlType::BF16: return k.dot_bf16;
    case GgmlType::Q8_0: return k.dot_q8_0;
    case GgmlType::Q2_K: return k.dot_q2_k;
    case GgmlType::Q4_K: return k.dot_q4_k;
    case GgmlType::IQ2_XXS: return k.dot_iq2_xxs;
    case GgmlType::MXFP4: return k.dot_mxfp4;
    default: return nullptr;
  }
}

}  // namespace detail

}  // namespace ds4::quant
