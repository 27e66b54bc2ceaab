// One thread per block, grid-stride; block index offset by the slice's first block.
#include "backend/cuda/synth_range.h"

namespace ds4::cuda {
namespace {

__global__ void synth_range_kernel(synth::SynthParams p, uint8_t* out, uint64_t first, uint64_t n_blocks) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n_blocks; i += stride)
    synth::synth_block(p, first + i, out + i * p.block_bytes);
}

}  // namespace

void synth_fill_range(const synth::SynthParams& p, uint8_t* out, uint64_t first_block, uint64_t n_blocks) {
  if (n_blocks == 0) return;
  const uint64_t want = (n_blocks + 255) / 256;
  const unsigned grid = static_cast<unsigned>(want < 65536 ? want : 65536);
  synth_range_kernel<<<grid, 256>>>(p, out, first_block, n_blocks);
}

}  // namespace ds4::cuda
