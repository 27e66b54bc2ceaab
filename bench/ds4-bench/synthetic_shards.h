// The per-rank memory plan of an expert-parallel synthetic model (ds4-bench --synthetic NAME
// --gpu-devices 0,1): every rank holds every non-routed tensor, the token embedding, the output
// head, one session's KV/compressor/indexer state and scratch, plus a contiguous range of routed
// experts; the ranges come from ds4::plan_gpus (expert_parallel mode) over per-rank budgets.
// Pure host arithmetic, printed before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/synthetic/synthetic_model.h"
#include "engine/gpu_plan.h"

namespace ds4::bench {

/// What each rank may use, bytes: the free memory of its device split evenly between the ranks
/// listed on that device (`--gpu-devices 0,0`: half each), lowered to its --gpu-vram cap.
/// `free_bytes[i]` is the free memory of devices[i]'s device (repeated entries repeat it).
/// `caps_gib`: empty (no cap), one cap for every rank, or one per rank; 0 = no cap for that rank.
/// Throws ds4::Error when the lists differ in length (caps: other than 0, 1 or devices.size()).
std::vector<uint64_t> rank_budgets(const std::vector<int>& devices, const std::vector<uint64_t>& free_bytes,
                                   const std::vector<double>& caps_gib);

/// synth::plan_memory of `spec` for one session of `ctx` tokens, counting only routed experts
/// [expert_begin, expert_end) (their rows of ffn_{gate,up,down}_exps); KV and scratch are the
/// whole model's (every rank runs attention). Throws ds4::Error for ctx < 1 or a bad range.
synth::MemoryPlan shard_memory(const synth::SyntheticSpec& spec, int64_t ctx, uint32_t expert_begin,
                               uint32_t expert_end);

/// One rank of the plan.
struct SyntheticShard {
  int device = 0;
  uint32_t expert_begin = 0, expert_end = 0;  ///< routed experts [begin, end)
  uint64_t budget = 0;                        ///< bytes it may use
  synth::MemoryPlan memory;                   ///< shard_memory of its range
};

/// The ranks of an expert-parallel synthetic model.
struct SyntheticShardPlan {
  std::string name;
  uint32_t n_expert = 0;               ///< routed experts of the model
  GpuPlan placement;                   ///< plan_gpus' result (bytes include the headroom)
  std::vector<SyntheticShard> shards;  ///< one per rank, in --gpu-devices order
  /// placement.describe() followed by one line per rank with its memory plan.
  std::string describe() const;
};

/// Plans `spec` over `devices` (repeats allowed: ranks sharing a GPU) with per-rank `budgets`
/// (bytes, e.g. rank_budgets), reserving `headroom` bytes per rank as synth::check_fits does:
/// ds4::plan_gpus in expert_parallel mode over the footprint of model_footprint with the recipe's
/// types, the embedding and the head counted on every rank (every rank generates them) and one
/// session's scratch + headroom as its scratch. Throws ds4::Error (plan_gpus' message naming the
/// device, its need, budget and shortfall) when a rank's share does not fit, for an empty list,
/// lists of different lengths or a budget of 0.
SyntheticShardPlan plan_synthetic_shards(const synth::SyntheticSpec& spec, int64_t ctx,
                                         const std::vector<int>& devices, const std::vector<uint64_t>& budgets,
                                         uint64_t headroom = uint64_t{512} << 20);

}  // namespace ds4::bench
