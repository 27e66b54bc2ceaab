// to_device_layout: rewrites the rows of Q8_0 and IQ2_XXS matvec weights in place into the split
// layout the kernels read (weight_layout.cuh): one block of threads per row, the row staged in
// shared memory, then written back payloads first, scale fields after.
#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_layout.cuh"
#include "common/error.h"

namespace ds4::cuda {
namespace {

struct SplitDesc {
  int block, bulk_off, bulk, tail_off, tail;
};

// Every offset and size is even (the formats' fields are 2-byte aligned): 2-byte moves.
__global__ void split_rows_kernel(uint8_t* w, int64_t rows, size_t row_bytes, int64_t nb, SplitDesc s) {
  extern __shared__ __align__(16) uint16_t row_sm[];
  const int64_t n2 = static_cast<int64_t>(row_bytes / 2);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto* row = reinterpret_cast<uint16_t*>(w + static_cast<size_t>(r) * row_bytes);
    for (int64_t i = threadIdx.x; i < n2; i += blockDim.x) row_sm[i] = row[i];
    __syncthreads();
    const int64_t bulk_end = nb * s.bulk / 2;
    for (int64_t o = threadIdx.x; o < n2; o += blockDim.x) {
      int64_t src;
      if (o < bulk_end) {
        const int64_t j = o / (s.bulk / 2), k = o % (s.bulk / 2);
        src = (j * s.block + s.bulk_off) / 2 + k;
      } else {
        const int64_t j = (o - bulk_end) / (s.tail / 2), k = (o - bulk_end) % (s.tail / 2);
        src = (j * s.block + s.tail_off) / 2 + k;
      }
      row[o] = row_sm[src];
    }
    __syncthreads();
  }
}

template <uint32_t T>
SplitDesc desc() {
  return {Split<T>::kBulk + Split<T>::kTail, Split<T>::kBulkOff, Split<T>::kBulk, Split<T>::kTailOff,
          Split<T>::kTail};
}

}  // namespace

void to_device_layout(const DevMatrix& m) {
  SplitDesc s{};
  int64_t vals = 0;
  if (m.type == kQ8_0) {
    s = desc<kQ8_0>();
    vals = 32;
  } else if (m.type == kIQ2_XXS) {
    s = desc<kIQ2_XXS>();
    vals = 256;
  } else {
    return;  // stored as in GGUF
  }
  if (m.rows <= 0 || !m.data) return;
  const int64_t nb = m.cols / vals;
  if (m.cols % vals != 0 || m.row_bytes != static_cast<size_t>(nb) * s.block)
    fail("CUDA weight layout: a {}-column row of type {} is not whole blocks ({} bytes)", m.cols, m.type,
         m.row_bytes);
  const size_t max_row = smem_limit();
  if (m.row_bytes > max_row)
    fail("CUDA weight layout: rows of {} bytes exceed the {} bytes one block can stage", m.row_bytes, max_row);
  allow_dynamic_smem(reinterpret_cast<const void*>(split_rows_kernel), m.row_bytes);
  const unsigned grid = static_cast<unsigned>(m.rows < 65536 ? m.rows : 65536);
  // The legacy default stream, as the uploads and the synthetic generator use; synchronised so
  // that kernels on any stream see the new layout.
  split_rows_kernel<<<grid, 256, m.row_bytes>>>(const_cast<uint8_t*>(m.data), m.rows, m.row_bytes, nb, s);
  check(cudaGetLastError(), "weight layout kernel launch");
  check(cudaStreamSynchronize(nullptr), "weight layout kernel");
}

}  // namespace ds4::cuda
