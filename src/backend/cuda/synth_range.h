// Seeded synthetic weight blocks for a slice of a tensor (expert-parallel ds4-bench --synthetic):
// a rank that holds routed experts [b, e) generates exactly the blocks those experts' rows have
// in the whole tensor, so the shards of all ranks are byte for byte the single-device model.
#pragma once

#include <cstdint>

#include "backend/synthetic/synthetic_blocks.h"

namespace ds4::cuda {

/// Writes synth::synth_block(params, first_block + i) to out + i * params.block_bytes for i in
/// [0, n_blocks), on the current device's default stream (asynchronous; check
/// cudaGetLastError). With first_block 0 this is cuda::synth_fill.
void synth_fill_range(const synth::SynthParams& params, uint8_t* out, uint64_t first_block,
                      uint64_t n_blocks);

}  // namespace ds4::cuda
