#include "backend/cuda/step_clock.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/launch_stream.h"

namespace ds4::cuda {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double us(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

bool StepClock::requested() { return env_is_on("DS4_CUDA_STEP_TIMES"); }

StepClock::StepClock() {
  for (cudaEvent_t& e : ev_) check(cudaEventCreate(&e), "step clock events");
}

StepClock::~StepClock() {
  for (cudaEvent_t e : ev_)
    if (e) cudaEventDestroy(e);
}

void StepClock::enter() {
  enter_ = Clock::now();
  if (have_left_) between_.push_back(us(enter_ - left_));
}

void StepClock::queued(cudaStream_t stream) { check(cudaEventRecord(ev_[0], stream), "step clock"); }

void StepClock::launched(cudaStream_t stream) {
  check(cudaEventRecord(ev_[1], stream), "step clock");
  launched_ = Clock::now();
}

void StepClock::copied(cudaStream_t stream) { check(cudaEventRecord(ev_[2], stream), "step clock"); }

void StepClock::leave() {
  left_ = Clock::now();
  have_left_ = true;
  float dev = 0, copy = 0;
  check(cudaEventElapsedTime(&dev, ev_[0], ev_[1]), "step clock");
  check(cudaEventElapsedTime(&copy, ev_[1], ev_[2]), "step clock");
  enqueue_.push_back(us(launched_ - enter_));
  device_.push_back(1e3 * dev);
  copy_.push_back(1e3 * copy);
  wait_.push_back(us(left_ - launched_));
}

std::string StepClock::report() const {
  if (wait_.empty()) return {};
  std::vector<double> total(wait_.size());
  for (size_t i = 0; i < total.size(); ++i) total[i] = enqueue_[i] + wait_[i];
  return fmt::format(
      "ds4 CUDA step times ({} decode steps, median us): between steps {:.1f}, eval {:.1f} = enqueue {:.1f} + "
      "wait {:.1f}; device: queued -> graph end {:.1f}, logits copy {:.1f}\n",
      total.size(), median(between_), median(total), median(enqueue_), median(wait_), median(device_),
      median(copy_));
}

}  // namespace ds4::cuda
