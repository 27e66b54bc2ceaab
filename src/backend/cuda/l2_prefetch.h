// L2 prefetches of weights beside the decode chain: the byte ranges one prefetch launch covers
// and their split into bulk-prefetch chunks (cp.async.bulk.prefetch.L2, sm_90 and later), shared
// by the kernel (kernels_ops.cu, l2_prefetch in kernels.h) and its host tests. A prefetch writes
// nothing: it only moves bytes into L2 ahead of the launch that reads them, so that a matvec
// whose weights arrived during a latency-bound stretch (the HC projection, the attention, the
// router) reads them at L2 rather than DRAM speed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"

namespace ds4::cuda {

/// One range to prefetch: `bytes` bytes at `base` (device memory); or, with `ids` (device
/// memory, `count` int32 ids, e.g. the router's chosen experts), `count` such ranges at
/// base + ids[i] * stride, skipping ids outside [0, id_limit) (expert parallelism marks the
/// experts of other ranks -1).
struct L2Range {
  const void* base = nullptr;
  uint64_t bytes = 0;
  uint64_t stride = 0;
  const int32_t* ids = nullptr;
  int count = 1;
  int id_limit = 0;
};

/// The most ranges one prefetch launch takes.
constexpr int kL2MaxRanges = 8;

/// The ranges of one prefetch launch (passed by value to the kernel).
struct L2Prefetch {
  L2Range r[kL2MaxRanges];
  int n = 0;
};

/// Bytes of one bulk prefetch (a range's last chunk may be shorter). One thread issues about
/// one chunk, so a range is requested by many SMs at once (each SM's copy engine issues its
/// requests one after another).
constexpr uint64_t kL2ChunkBytes = 32 * 1024;

/// The 16-byte-aligned part [l2_span_begin(a), l2_span_end(a, n)) of the bytes [a, a + n): a bulk
/// prefetch takes a 16-byte-aligned address and a multiple of 16 bytes, so at most 15 bytes at
/// either end are left out (a prefetch is a hint; they are read from DRAM as before).
DS4_HD uint64_t l2_span_begin(uint64_t a) { return (a + 15) & ~uint64_t{15}; }
DS4_HD uint64_t l2_span_end(uint64_t a, uint64_t n) { return (a + n) & ~uint64_t{15}; }

/// Chunks of kL2ChunkBytes that cover the aligned span of [a, a + n) (0 when the span is empty).
DS4_HD uint64_t l2_chunks(uint64_t a, uint64_t n) {
  const uint64_t b = l2_span_begin(a), e = l2_span_end(a, n);
  return e > b ? (e - b + kL2ChunkBytes - 1) / kL2ChunkBytes : 0;
}

/// Chunk k (0 <= k < l2_chunks(a, n)) of that span: its address (16-byte aligned) and its size in
/// bytes (a multiple of 16, at most kL2ChunkBytes).
struct L2Chunk {
  uint64_t addr;
  uint32_t bytes;
};
DS4_HD L2Chunk l2_chunk(uint64_t a, uint64_t n, uint64_t k) {
  const uint64_t s = l2_span_begin(a) + k * kL2ChunkBytes, e = l2_span_end(a, n);
  return {s, static_cast<uint32_t>(e - s < kL2ChunkBytes ? e - s : kL2ChunkBytes)};
}

/// The first index j >= first with j % stride == t % stride (t < stride): where thread t of a
/// grid-stride loop over all chunks starts within a range whose chunks begin at index `first`.
DS4_HD uint64_t l2_first_of(uint64_t first, uint64_t t, uint64_t stride) {
  return first + (t + stride - first % stride) % stride;
}

}  // namespace ds4::cuda
