// Synthetic weights generated in device memory (ds4-bench --synthetic): one thread per block,
// the same inline generator the host tests check (src/backend/synthetic/synthetic_blocks.h).
#include "backend/cuda/kernels.h"
#include "backend/synthetic/synthetic_blocks.h"

namespace ds4::cuda {
namespace {

__global__ void synth_kernel(synth::SynthParams p, uint8_t* out, uint64_t n_blocks) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t b = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; b < n_blocks; b += stride)
    synth::synth_block(p, b, out + b * p.block_bytes);
}

}  // namespace

void synth_fill(const synth::SynthParams& p, uint8_t* out, uint64_t n_blocks) {
  if (n_blocks == 0) return;
  const uint64_t want = (n_blocks + 255) / 256;
  const unsigned grid = static_cast<unsigned>(want < 65536 ? want : 65536);
  synth_kernel<<<grid, 256>>>(p, out, n_blocks);
}

}  // namespace ds4::cuda
