// The ggml tensor type ids used in GGUF files, with their block geometry (elements per block,
// bytes per block). One table shared by the GGUF reader/writer and the quantization kernels.
// Source: spec §2.1 (type table), GGUF specification; MXFP4 (39) added for completeness.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ds4 {

/// ggml type ids as stored in a GGUF tensor directory (u32).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

/// Block geometry of one ggml type: `block_bytes` bytes store `block_elems` elements.
struct GgmlTypeInfo {
  std::string_view name;
  uint32_t block_elems;
  uint32_t block_bytes;
};

/// Returns the geometry of type id `id`, or std::nullopt for an id this build does not know.
constexpr std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  switch (id) {
    case 0: return GgmlTypeInfo{"F32", 1, 4};
    case 1: return GgmlTypeInfo{"F16", 1, 2};
    case 2: return GgmlTypeInfo{"Q4_0", 32, 18};
    case 3: return GgmlTypeInfo{"Q4_1", 32, 20};
    case 6: return GgmlTypeInfo{"Q5_0", 32, 22};
    case 7: return GgmlTypeInfo{"Q5_1", 32, 24};
    case 8: return GgmlTypeInfo{"Q8_0", 32, 34};
    case 9: return GgmlTypeInfo{"Q8_1", 32, 36};
    case 10: return GgmlTypeInfo{"Q2_K", 256, 84};
    case 11: return GgmlTypeInfo{"Q3_K", 256, 110};
    case 12: return GgmlTypeInfo{"Q4_K", 256, 144};
    case 13: return GgmlTypeInfo{"Q5_K", 256, 176};
    case 14: return GgmlTypeInfo{"Q6_K", 256, 210};
    case 15: return GgmlTypeInfo{"Q8_K", 256, 292};
    case 16: return GgmlTypeInfo{"IQ2_XXS", 256, 66};
    case 17: return GgmlTypeInfo{"IQ2_XS", 256, 74};
    case 18: return GgmlTypeInfo{"IQ3_XXS", 256, 98};
    case 19: return GgmlTypeInfo{"IQ1_S", 256, 50};
    case 20: return GgmlTypeInfo{"IQ4_NL", 32, 18};
    case 21: return GgmlTypeInfo{"IQ3_S", 256, 110};
    case 22: return GgmlTypeInfo{"IQ2_S", 256, 82};
    case 23: return GgmlTypeInfo{"IQ4_XS", 256, 136};
    case 24: return GgmlTypeInfo{"I8", 1, 1};
    case 25: return GgmlTypeInfo{"I16", 1, 2};
    case 26: return GgmlTypeInfo{"I32", 1, 4};
    case 27: return GgmlTypeInfo{"I64", 1, 8};
    case 28: return GgmlTypeInfo{"F64", 1, 8};
    case 29: return GgmlTypeInfo{"IQ1_M", 256, 56};
    case 30: return GgmlTypeInfo{"BF16", 1, 2};
    case 34: return GgmlTypeInfo{"TQ1_0", 256, 54};
    case 35: return GgmlTypeInfo{"TQ2_0", 256, 66};
    case 39: return GgmlTypeInfo{"MXFP4", 32, 17};
    default: return std::nullopt;
  }
}

/// Name of a type id for messages ("Q8_0", or "type 77" when unknown).
inline std::string ggml_type_name(uint32_t id) {
  if (auto info = ggml_type_info(id)) return std::string(info->name);
  return "type " + std::to_string(id);
}
inline std::string ggml_type_name(GgmlType t) { return ggml_type_name(static_cast<uint32_t>(t)); }

}  // namespace ds4
