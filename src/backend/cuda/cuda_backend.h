// The CUDA backend (issue "CUDA backend for H100/H200"): weights uploaded once to device memory
// (cudaMalloc, never managed memory), each session's KV/compressor/indexer state on the device,
// and a forward pass with the same math as backend/cpu/forward.cpp (spec §3). Tokens are
// evaluated one at a time (prefill = repeated decode steps, each a CUDA graph replay), so any
// chunking of a prompt gives bit-identical logits (spec §4.2). Also: synthetic full-size models
// generated in device memory, and the device copy / matvec bandwidth probes of ds4-bench.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/synthetic/synthetic_model.h"

#include "engine/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::cuda {

/// Options of the CUDA backend.
struct CudaOptions {
  int device = 0;  ///< CUDA device ordinal
  /// Called while the weights upload, after each layer: (layers uploaded, layers in total).
  std::function<void(uint64_t, uint64_t)> progress = {};
};

/// Number of usable CUDA devices; 0 when there is no device or no working driver (never throws).
int device_count();

/// Makes `device` current and uploads the quantization tables the kernels read. Throws
/// ds4::Error when there is no CUDA device or no such device.
void prepare_device(int device);

/// Creates the CUDA backend for a loaded model on options.device: uploads every matrix and
/// vector the forward pass reads, the token embedding included (rows are looked up on the
/// device, type F32/F16/BF16/Q8_0). The config and weights must outlive the backend. Throws ds4::Error when no CUDA
/// device is present, the device ordinal is invalid, device memory runs out, or a matrix has a
/// type the kernels do not support (supported: F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, MXFP4).
std::unique_ptr<Backend> make_cuda_backend(const model::Config& config,
                                           const model::Weights& weights,
                                           const CudaOptions& options = {});

/// Device bytes a CUDA session's layer-major prefill takes for its chunks (CudaForward's chunk
/// size: DS4_CUDA_BATCH or 2048 tokens), bounding the quantized activation rows by the model's
/// widest matrix input in Q8_K (the widest activation format). For the engine's memory plan.
uint64_t prefill_scratch_bytes(const model::Config& config);

/// Free and total memory of CUDA device `device`, in bytes. Throws ds4::Error when there is no
/// such device.
std::pair<uint64_t, uint64_t> device_memory(int device);

/// Options of a synthetic backend.
struct SyntheticOptions {
  int device = 0;
  uint64_t seed = 1;          ///< model seed (tensor seeds mix it with the tensor names)
  int64_t ctx = 1;            ///< the session context the caller will open (memory plan)
  double gpu_vram_gib = 0;    ///< cap on the device memory used, GiB (0: all free memory)
};

/// The device memory plan of `spec` with one session of `ctx` tokens (synth::plan_memory with
/// the recipe's types).
synth::MemoryPlan synthetic_plan(const synth::SyntheticSpec& spec, int64_t ctx);

/// Creates a CUDA backend whose weights are generated directly in device memory (no file, no
/// host copy): the real shapes and types of spec (DeviceWeights' synthetic constructor).
/// Checks synthetic_plan(spec, options.ctx) against the device's free memory and the cap
/// before allocating anything. Throws ds4::Error when there is no device, the plan does not
/// fit (synth::check_fits' message), or an allocation fails.
std::unique_ptr<Backend> make_synthetic_backend(const synth::SyntheticSpec& spec,
                                                const SyntheticOptions& options);

/// Device-to-device copy bandwidth on `device`: a cudaMemcpy of `bytes` (median of 5 after a
/// warm-up), counting bytes read plus bytes written, in GB/s (1e9 bytes).
double copy_bandwidth_gbps(int device, size_t bytes);

/// Achieved bandwidth of one matrix kind's decode matvec (activation quantization included).
struct MatvecRate {
  std::string name;     ///< tensor name without the "blk.N." prefix
  std::string type;     ///< ggml type name
  uint64_t bytes = 0;   ///< weight bytes read by one token's calls over all layers
  double seconds = 0;   ///< device time of those calls (median of the repetitions)
  int calls = 0;        ///< matvec calls per token (layers, or 1 for the output head)
};

/// Times every matrix kind of a CUDA backend's model as one decode token reads it: each kind
/// over all layers back to back (so the weights stream from memory, not L2), routed experts
/// with n_expert_used random expert ids, on random non-zero activations; CUDA events, median of
/// `reps`. Throws ds4::Error when `backend` is not a CUDA backend.
std::vector<MatvecRate> profile_matvecs(Backend& backend, int reps);

}  // namespace ds4::cuda
