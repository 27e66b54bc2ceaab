// The CUDA backend (issue "CUDA backend for H100/H200"): weights uploaded once to device memory
// (cudaMalloc, never managed memory), each session's KV/compressor/indexer state on the device,
// and a forward pass with the same math as backend/cpu/forward.cpp (spec §3). Tokens are
// evaluated one at a time (prefill = repeated decode steps), so any chunking of a prompt gives
// bit-identical logits (spec §4.2).
#pragma once

#include <memory>

#include "engine/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::cuda {

/// Options of the CUDA backend.
struct CudaOptions {
  int device = 0;  ///< CUDA device ordinal
};

/// Number of usable CUDA devices; 0 when there is no device or no working driver (never throws).
int device_count();

/// Creates the CUDA backend for a loaded model on options.device: uploads every matrix and
/// vector the forward pass reads (the token embedding stays on the host; rows are looked up
/// there). The config and weights must outlive the backend. Throws ds4::Error when no CUDA
/// device is present, the device ordinal is invalid, device memory runs out, or a matrix has a
/// type the kernels do not support (supported: F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, MXFP4).
std::unique_ptr<Backend> make_cuda_backend(const model::Config& config,
                                           const model::Weights& weights,
                                           const CudaOptions& options = {});

}  // namespace ds4::cuda
