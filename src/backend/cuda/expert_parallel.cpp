#include "backend/cuda/expert_parallel.h"

#include <algorithm>
#include <barrier>
#include <functional>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nccl.h"
#include "common/error.h"

namespace ds4::cuda {
namespace {

void select(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

/// NCCL all-reduce, one communicator per rank (distinct devices).
class NcclReducer final : public ExpertReducer {
 public:
  /// `n` = the f32 count of the decode step's reduction (n_expert_used x n_embd).
  NcclReducer(std::vector<int> devices, size_t n) : group_(std::move(devices)) { warm_up(n); }
  void all_reduce(int rank, float* y, size_t n, cudaStream_t stream) override {
    group_.all_reduce_sum_rank(rank, y, n, stream);
  }
  // Captured decode steps are safe once the communicators are connected (warm_up): NCCL sets
  // up peer connections lazily at the first collective, and that set-up cannot run inside a
  // capture (the first 2-GPU attempt, capturing the very first all-reduce, failed with NCCL's
  // "internal error").
  bool graph_safe() const override { return true; }

 private:
  // One uncaptured all-reduce of the decode step's size on every device, driven from this
  // thread as one NCCL group, so the connections the step uses exist before any capture.
  void warm_up(size_t n) {
    const int ranks = group_.size();
    std::vector<DeviceArray<float>> bufs(static_cast<size_t>(ranks));
    std::vector<float*> ptrs;
    std::vector<cudaStream_t> streams(static_cast<size_t>(ranks), nullptr);
    for (int r = 0; r < ranks; ++r) {
      select(group_.device(r));
      bufs[r] = DeviceArray<float>(n);
      ptrs.push_back(bufs[r].get());
      check(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), "cudaStreamCreate");
    }
    group_.all_reduce_sum(ptrs, n, streams);
    for (int r = 0; r < ranks; ++r) {
      select(group_.device(r));
      check(cudaStreamSynchronize(streams[r]), "NCCL warm-up");
      cudaStreamDestroy(streams[r]);
    }
  }
  NcclGroup group_;
};

/// Ranks sharing one device: each copies its share into its slot, a host barrier makes every
/// rank's copy visible (events), each rank sums the slots in rank order into its own y, and a
/// second barrier keeps a slot from being overwritten before every rank has read it.
class SameDeviceReducer final : public ExpertReducer {
 public:
  SameDeviceReducer(int device, int ranks, size_t max_n)
      : ranks_(ranks), max_n_(max_n), bar_(ranks), ready_(ranks), done_(ranks) {
    select(device);
    slots_ = DeviceArray<float>(static_cast<size_t>(ranks) * max_n);
    for (int r = 0; r < ranks; ++r) {
      check(cudaEventCreateWithFlags(&ready_[r], cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventCreateWithFlags(&done_[r], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  ~SameDeviceReducer() override {
    for (int r = 0; r < ranks_; ++r) {
      cudaEventDestroy(ready_[r]);
      cudaEventDestroy(done_[r]);
    }
  }
  void all_reduce(int rank, float* y, size_t n, cudaStream_t stream) override {
    if (n > max_n_) fail("expert reduction of {} values exceeds its {} slots", n, max_n_);
    float* mine = slots_.get() + static_cast<size_t>(rank) * n;
    check(cudaMemcpyAsync(mine, y, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "slot copy");
    check(cudaEventRecord(ready_[rank], stream), "cudaEventRecord");
    bar_.arrive_and_wait();
    for (int q = 0; q < ranks_; ++q) check(cudaStreamWaitEvent(stream, ready_[q], 0), "cudaStreamWaitEvent");
    sum_slots(slots_.get(), ranks_, static_cast<int64_t>(n), y);
    check(cudaEventRecord(done_[rank], stream), "cudaEventRecord");
    bar_.arrive_and_wait();
    for (int q = 0; q < ranks_; ++q) check(cudaStreamWaitEvent(stream, done_[q], 0), "cudaStreamWaitEvent");
  }
  bool graph_safe() const override { return false; }

 private:
  int ranks_;
  size_t max_n_;
  std::barrier<> bar_;
  std::vector<cudaEvent_t> ready_, done_;
  DeviceArray<float> slots_;
};

/// Runs `work(r)` for every rank, rank 0 on the calling thread; rethrows the first error.
void for_each_rank(int ranks, const std::function<void(int)>& work) {
  std::exception_ptr error;
  std::mutex m;
  auto guarded = [&](int r) {
    try {
      work(r);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

struct Rank {
  int device = 0;
  ExpertShard shard;
  std::unique_ptr<DeviceWeights> weights;
};

class ExpertParallelSession final : public BackendSession {
 public:
  ExpertParallelSession(const model::Config& c, std::vector<Rank>& ranks, int64_t ctx) : ranks_(ranks) {
    forwards_.resize(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      select(ranks[r].device);
      forwards_[r] = std::make_unique<CudaForward>(c, *ranks[r].weights, ctx, &ranks[r].shard);
    }
  }
  void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
            std::span<float> all_logits) override {
    for_each_rank(size(), [&](int r) {
      select(ranks_[r].device);
      forwards_[r]->eval(tokens, pos0, r == 0 ? last_logits : std::span<float>(),
                         r == 0 ? all_logits : std::span<float>());
    });
  }
  void reset() override {
    for (int r = 0; r < size(); ++r) {
      select(ranks_[r].device);
      forwards_[r]->reset();
    }
  }
  void export_state(model::KvState& out) const override {  // every rank holds the same state
    select(ranks_[0].device);
    forwards_[0]->export_state(out);
  }
  void import_state(const model::KvState& in) override {
    for (int r = 0; r < size(); ++r) {
      select(ranks_[r].device);
      forwards_[r]->import_state(in);
    }
  }
  int64_t ctx() const override { return forwards_[0]->ctx(); }

 private:
  int size() const { return static_cast<int>(forwards_.size()); }
  std::vector<Rank>& ranks_;
  std::vector<std::unique_ptr<CudaForward>> forwards_;
};

/// Builds the weights of one rank (on the current device) holding experts [begin, end).
using RankWeightsFactory = std::function<std::unique_ptr<DeviceWeights>(uint32_t begin, uint32_t end)>;

class ExpertParallelBackend final : public Backend {
 public:
  ExpertParallelBackend(const model::Config& c, const RankWeightsFactory& make_weights,
                        const std::vector<int>& devices,
                        const std::vector<std::pair<uint32_t, uint32_t>>& ranges)
      : c_(c) {
    const bool same = std::all_of(devices.begin(), devices.end(), [&](int d) { return d == devices[0]; });
    if (same && devices.size() > 1)
      reducer_ = std::make_unique<SameDeviceReducer>(devices[0], static_cast<int>(devices.size()),
                                                     size_t{c.n_expert_used} * c.n_embd);
    else
      reducer_ = std::make_unique<NcclReducer>(devices, size_t{c.n_expert_used} * c.n_embd);
    ranks_.resize(devices.size());
    for (size_t r = 0; r < devices.size(); ++r) {
      Rank& k = ranks_[r];
      k.device = devices[r];
      k.shard = ExpertShard{ranges[r].first, ranges[r].second, static_cast<int>(r), reducer_.get()};
      select(k.device);
      k.weights = make_weights(k.shard.begin, k.shard.end);
    }
  }
  std::string name() const override { return "cuda"; }
  std::unique_ptr<BackendSession> new_session(int64_t ctx) override {
    return std::make_unique<ExpertParallelSession>(c_, ranks_, ctx);
  }

 private:
  model::Config c_;
  std::unique_ptr<ExpertReducer> reducer_;
  std::vector<Rank> ranks_;
};

/// The checks shared by both factories (see make_expert_parallel_backend's doc), then every
/// device prepared.
void check_layout(const model::Config& config, const std::vector<int>& devices,
                  const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  if (devices.empty()) fail("expert parallelism needs at least one device");
  if (ranges.size() != devices.size())
    fail("expert parallelism: {} expert ranges for {} devices", ranges.size(), devices.size());
  uint32_t next = 0;
  for (const auto& [b, e] : ranges) {
    if (b != next || e <= b) fail("expert ranges must be non-empty, contiguous and ascending from 0");
    next = e;
  }
  if (next != config.n_expert)
    fail("expert ranges cover {} of the model's {} experts", next, config.n_expert);
  const bool same = std::all_of(devices.begin(), devices.end(), [&](int d) { return d == devices[0]; });
  for (size_t i = 0; i < devices.size() && !same; ++i)
    for (size_t j = i + 1; j < devices.size(); ++j)
      if (devices[i] == devices[j])
        fail("expert parallelism: device {} is listed twice among other devices (NCCL runs one "
             "rank per device; list every device once, or one device for every rank)", devices[i]);
  const int n = device_count();
  for (int d : devices)
    if (d < 0 || d >= n) fail("--gpu-devices: CUDA device {} does not exist ({} present)", d, n);
  // Same setup as the single-device backend (quantization tables on every device).
  for (int d : devices) prepare_device(d);
}

}  // namespace

std::unique_ptr<Backend> make_expert_parallel_backend(
    const model::Config& config, const model::Weights& weights, const std::vector<int>& devices,
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  check_layout(config, devices, ranges);
  return std::make_unique<ExpertParallelBackend>(
      config,
      [&](uint32_t b, uint32_t e) { return std::make_unique<DeviceWeights>(config, weights, b, e); },
      devices, ranges);
}

std::unique_ptr<Backend> make_synthetic_expert_parallel_backend(
    const synth::SyntheticSpec& spec, uint64_t seed, const std::vector<int>& devices,
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  spec.config.validate("synthetic model config");
  check_layout(spec.config, devices, ranges);
  return std::make_unique<ExpertParallelBackend>(
      spec.config,
      [&](uint32_t b, uint32_t e) {
        return std::make_unique<DeviceWeights>(spec.config, spec.recipe, seed, b, e);
      },
      devices, ranges);
}

}  // namespace ds4::cuda
