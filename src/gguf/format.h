// GGUF v3 container constants shared by the reader and the writer (spec §2.1).
// Layout: header (magic, version, n_tensors, n_kv) | metadata | tensor directory |
// padding to `alignment` | tensor data (each tensor starts at a multiple of `alignment`).
// All integers are little-endian; this code assumes a little-endian host.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>

#include "common/ggml_type.h"

namespace ds4::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; big-endian hosts are not supported");

/// "GGUF" read as a little-endian u32.
inline constexpr uint32_t kMagic = 0x46554747u;
/// The only container version ds4 reads or writes.
inline constexpr uint32_t kVersion = 3;
/// Tensor-data alignment when `general.alignment` is absent.
inline constexpr uint32_t kDefaultAlignment = 32;
/// Metadata key that overrides the alignment (u32, non-zero power of two).
inline constexpr const char* kAlignmentKey = "general.alignment";
/// Maximum tensor rank (ggml's GGML_MAX_DIMS is 4; GGUF files may use up to 8).
inline constexpr uint32_t kMaxDims = 8;
/// Maximum nesting of metadata arrays: a top-level array is level 1.
inline constexpr uint32_t kMaxArrayDepth = 8;
/// Header size in bytes: magic u32, version u32, n_tensors u64, n_kv u64.
inline constexpr uint64_t kHeaderBytes = 24;

/// Rounds `x` up to a multiple of `alignment` (a power of two). Caller guarantees no overflow.
constexpr uint64_t align_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

/// True when `a` is a non-zero power of two.
constexpr bool is_power_of_two(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

/// Bytes taken by `n_elements` elements of a type with geometry `info`:
/// ceil(n / block_elems) * block_bytes (spec §2.1). std::nullopt when that overflows u64.
constexpr std::optional<uint64_t> tensor_nbytes(const GgmlTypeInfo& info, uint64_t n_elements) {
  const uint64_t blocks = n_elements / info.block_elems + (n_elements % info.block_elems != 0 ? 1 : 0);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info.block_bytes), &bytes)) return std::nullopt;
  return bytes;
}

/// Product of `dims`, or std::nullopt when it exceeds INT64_MAX (ggml counts elements as int64).
template <typename Range>
constexpr std::optional<uint64_t> element_count(const Range& dims) {
  uint64_t n = 1;
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n) || n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  }
  return n;
}

}  // namespace ds4::gguf
