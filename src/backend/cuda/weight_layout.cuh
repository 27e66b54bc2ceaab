// Row layout of matvec weights in device memory. GGUF blocks of Q8_0 (34 bytes) and IQ2_XXS
// (66 bytes) put a 2-byte f16 scale before the payload, so their payloads sit 2 bytes off any
// 16-byte boundary and a kernel can only read them 2 bytes at a time. On the device every row of
// these formats is stored "split": the payloads of its nb blocks first (nb * kBulk bytes, 16-byte
// aligned whenever the row is), then the blocks' scale fields (nb * kTail bytes). A row keeps its
// byte count, so row, expert and shard offsets are the GGUF ones; only the bytes inside a row
// move (to_device_layout, weight_layout.cu). Other formats keep the GGUF layout. Included by .cu
// files only.
#pragma once

#include <cstdint>

namespace ds4::cuda {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ2_K = 10, kQ4_K = 12, kIQ2_XXS = 16,
                   kBF16 = 30, kMXFP4 = 39;

/// Split description of a block format: payload (kBulkOff, kBulk bytes) and scale field
/// (kTailOff, kTail bytes) inside the GGUF block; kOn false for formats stored as in GGUF.
template <uint32_t T> struct Split { static constexpr bool kOn = false; };
template <> struct Split<kQ8_0> {
  static constexpr bool kOn = true;
  static constexpr int kBulkOff = 2, kBulk = 32, kTailOff = 0, kTail = 2;
};
template <> struct Split<kIQ2_XXS> {
  static constexpr bool kOn = true;
  static constexpr int kBulkOff = 2, kBulk = 64, kTailOff = 0, kTail = 2;
};

}  // namespace
}  // namespace ds4::cuda
