#include "backend/cuda/step_profile.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_stream.h"

namespace ds4::cuda {

bool StepProfile::requested() { return env_is_on("DS4_CUDA_PROFILE"); }

StepProfile::~StepProfile() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t StepProfile::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    events_.push_back(e);
  }
  return events_[i];
}

void StepProfile::begin(cudaStream_t stream, int64_t sleep_us) {
  stream_ = stream;
  names_.clear();
  device_sleep(sleep_us);
  check(cudaEventRecord(event(0), stream_), "cudaEventRecord");
}

void StepProfile::mark(const char* op) {
  names_.push_back(op);
  check(cudaEventRecord(event(names_.size()), stream_), "cudaEventRecord");
}

void StepProfile::end() {
  check(cudaEventSynchronize(event(names_.size())), "profiled step");
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
    Total& t = totals_[names_[i]];
    t.ms += ms;
    t.calls += 1;
    step_ms_ += ms;
  }
  ++steps_;
}

std::string StepProfile::report() const {
  if (steps_ == 0) return {};
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  const double n = static_cast<double>(steps_);
  std::string out = fmt::format("ds4 CUDA step profile: {} steps, {:.1f} us per step (device time between events)\n",
                                steps_, 1e3 * step_ms_ / n);
  out += fmt::format("  {:<26} {:>8} {:>11} {:>9} {:>6}\n", "operation", "calls", "us/step", "us/call", "share");
  for (const auto& [name, t] : rows)
    out += fmt::format("  {:<26} {:>8.1f} {:>11.1f} {:>9.2f} {:>5.1f}%\n", name, t.calls / n, 1e3 * t.ms / n,
                       1e3 * t.ms / static_cast<double>(t.calls), 100.0 * t.ms / step_ms_);
  return out;
}

}  // namespace ds4::cuda
