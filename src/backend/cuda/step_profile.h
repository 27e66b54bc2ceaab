// Per-operation device time of decode steps (DS4_CUDA_PROFILE=1): a CUDA event after every
// operation of a step, the step's launches queued behind a short device-side sleep so the GPU
// runs them back to back (the host cannot fall behind and add idle gaps), and the times between
// consecutive events summed per operation name. Printed to stderr when the session ends.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ds4::cuda {

/// Collects per-operation device times of the steps it brackets. Not thread-safe; one per session.
class StepProfile {
 public:
  /// True when DS4_CUDA_PROFILE is set to a value other than "0" (read once per call).
  static bool requested();
  ~StepProfile();

  /// Starts a step on `stream`: queues a device sleep of `sleep_us` microseconds (long enough
  /// for the host to queue every launch of the step) and the step's first event.
  void begin(cudaStream_t stream, int64_t sleep_us);
  /// Records an event after the operations queued since the previous mark, named `op`
  /// (a string literal: the pointer is kept).
  void mark(const char* op);
  /// Waits for the step and adds each interval to its operation's total. Throws ds4::Error on a
  /// CUDA failure.
  void end();
  /// The table of every operation (total us per step, calls per step, share), sorted by time,
  /// for `steps` steps; empty when nothing was profiled.
  std::string report() const;

 private:
  cudaEvent_t event(size_t i);
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> names_;  // names_[i]: the op ending at events_[i + 1]
  std::map<std::string, Total> totals_;
  int64_t steps_ = 0;
  double step_ms_ = 0;
};

}  // namespace ds4::cuda
