// Expert parallelism for the CUDA backend (issue #8): ranks (one per device entry) each hold the
// whole model except the routed experts, which are split into contiguous id ranges. Every rank
// runs attention, the router and the shared expert itself (identical inputs give identical
// state on every rank) and computes only the output rows of the selected experts it holds; the
// rows (zero where another rank holds the expert) are summed over ranks, which reproduces each
// row exactly, and every rank combines them in the single-device order (spec §3.5), so results
// are bit-identical to one device. Ranks run in one
// thread each. The sum goes through NCCL when the devices are distinct, or through an
// in-device reduction when every rank shares one device (for testing the split on one GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/synthetic/synthetic_model.h"
#include "engine/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::cuda {

/// Sums a vector over the ranks of an expert-parallel group. Every rank calls all_reduce the
/// same number of times in the same order, each from its own thread.
class ExpertReducer {
 public:
  virtual ~ExpertReducer() = default;
  /// In-place sum over ranks of y [n] f32 (device memory of rank `rank`), enqueued on `stream`.
  /// Throws ds4::Error on a CUDA/NCCL error.
  virtual void all_reduce(int rank, float* y, size_t n, cudaStream_t stream) = 0;
  /// Whether the enqueued work may be captured in a CUDA graph.
  virtual bool graph_safe() const = 0;
};

/// The routed experts one rank holds and how its share is combined.
struct ExpertShard {
  uint32_t begin = 0, end = 0;      ///< expert ids [begin, end)
  int rank = 0;
  ExpertReducer* reducer = nullptr;  ///< not owned
};

/// An expert-parallel CUDA backend for a loaded model. `devices[r]` runs rank r holding experts
/// `ranges[r]` = [begin, end) (contiguous, ascending, together covering every expert; e.g. from
/// ds4::plan_gpus in expert_parallel mode). Devices must be all distinct (NCCL; one rank per
/// device) or all equal (in-device reduction, CUDA graphs off). Logits come from rank 0.
/// Throws ds4::Error for an empty or mismatched list, ranges that do not tile the experts,
/// a mix of repeated and distinct devices, a missing device, NCCL that cannot be loaded, or
/// device memory that runs out.
std::unique_ptr<Backend> make_expert_parallel_backend(
    const model::Config& config, const model::Weights& weights, const std::vector<int>& devices,
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

/// An expert-parallel backend for a synthetic model (ds4-bench --synthetic NAME --gpu-devices):
/// rank r generates in the memory of `devices[r]` every non-routed tensor and only routed
/// experts `ranges[r]`, with the seeds and block indices of the single-device synthetic model
/// (DeviceWeights' synthetic constructor), so the ranks together hold exactly the weights of
/// cuda::make_synthetic_backend(spec, {.seed = seed}) and give its logits bit for bit. The
/// caller checks memory first (ds4-bench prints the per-rank plan). Throws ds4::Error as
/// make_expert_parallel_backend does, or for a config that does not validate.
std::unique_ptr<Backend> make_synthetic_expert_parallel_backend(
    const synth::SyntheticSpec& spec, uint64_t seed, const std::vector<int>& devices,
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace ds4::cuda
