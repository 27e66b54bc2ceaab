// Where the wall time of a decode step goes (DS4_CUDA_STEP_TIMES=1): host time between steps
// (the caller's sampling and bookkeeping), the host's enqueueing, the device time from the
// step's first queued command to the end of its graph, the logits copy, and the eval call as a
// whole. Medians over the session's decode steps that return logits, printed to stderr when the
// session ends. The timeline (DS4_CUDA_TIMELINE) shows the kernels inside a step; this shows
// what lies around them.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <vector>

namespace ds4::cuda {

/// Brackets decode steps with host clocks and CUDA events. Not thread-safe; one per session.
class StepClock {
 public:
  /// True when DS4_CUDA_STEP_TIMES is set to a value other than "0" (read once).
  static bool requested();
  /// Creates the events. Throws ds4::Error on a CUDA failure.
  StepClock();
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  /// The step starts (host clock; eval's entry).
  void enter();
  /// Before the step's first device command on `stream` (an event; the device clock starts).
  void queued(cudaStream_t stream);
  /// After the graph launch returned: the graph's end on `stream` (event) and the host clock.
  void launched(cudaStream_t stream);
  /// After the logits copy was queued on `stream` (event).
  void copied(cudaStream_t stream);
  /// The step's results are on the host (after the stream synchronisation): reads the events
  /// and keeps this step's intervals. Throws ds4::Error on a CUDA failure.
  void leave();
  /// Medians (us) of each interval over the steps so far; empty when none was timed.
  std::string report() const;

 private:
  using Clock = std::chrono::steady_clock;
  cudaEvent_t ev_[3] = {};
  Clock::time_point enter_{}, launched_{}, left_{};
  bool have_left_ = false;
  // Per step, us: between steps, enqueue, device (queued -> graph end), copy, wait.
  std::vector<double> between_, enqueue_, device_, copy_, wait_;
};

}  // namespace ds4::cuda
