// The CUDA stream every launcher in kernels_*.cu enqueues on (nullptr: the legacy default
// stream). CudaForward points it at its own stream while it runs a step, so a step's launches
// can be captured into a CUDA graph. Per host thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ds4::cuda {

/// The current thread's launch stream (assignable).
cudaStream_t& launch_stream();

/// Points launch_stream() at `s` for the lifetime of the guard (restores the previous stream).
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t s) : prev_(launch_stream()) { launch_stream() = s; }
  ~StreamGuard() { launch_stream() = prev_; }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t prev_;
};

/// Whether the current thread's launches are made without PDL (PdlOffGuard; assignable).
bool& pdl_suppressed();

/// Launches made during the guard's lifetime skip PDL when `off`: each then starts only once the
/// launch before it on the stream has completed, so its blocks do not park on the SMs
/// (registers, shared memory) while that launch runs (DS4_CUDA_NO_PDL, cuda_forward.cpp).
class PdlOffGuard {
 public:
  explicit PdlOffGuard(bool off) : prev_(pdl_suppressed()) { pdl_suppressed() = prev_ || off; }
  ~PdlOffGuard() { pdl_suppressed() = prev_; }
  PdlOffGuard(const PdlOffGuard&) = delete;
  PdlOffGuard& operator=(const PdlOffGuard&) = delete;

 private:
  bool prev_;
};

/// Whether kernels launch with programmatic dependent launch (PDL, Hopper and later): each
/// forward kernel may then be scheduled while its predecessor on the stream finishes, and waits
/// for it (griddepcontrol.wait) before touching any data the predecessor wrote or reads. True
/// when the current device has compute capability >= 9, unless DS4_CUDA_PDL=0 or the step
/// profile (DS4_CUDA_PROFILE, which times operations one by one) is on.
bool pdl_enabled();

/// Bytes of shared memory (dynamic + static) one block may use on the current device: its opt-in
/// maximum (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KiB on sm_90 and sm_100, 163 KiB on
/// sm_80, 99 KiB on sm_86, sm_89 and sm_120), lowered to DS4_CUDA_SMEM_LIMIT bytes when that is
/// set (tests emulate a smaller GPU on a larger one); 48 KiB when the device cannot be queried.
/// Launchers pick a kernel shape within it. Throws ds4::Error if DS4_CUDA_SMEM_LIMIT is not a
/// whole number of bytes from 16384 up.
size_t smem_limit();

/// True when environment variable `name` is exactly "0": the DS4_CUDA_* switches that turn a
/// default path off (docs/architecture.md).
bool env_is_zero(const char* name);

/// True when environment variable `name` is set, non-empty and not "0": the DS4_CUDA_* switches
/// that turn a diagnostic on (DS4_CUDA_PROFILE, DS4_CUDA_STEP_TIMES, DS4_CUDA_PREFILL_PROFILE).
bool env_is_on(const char* name);

}  // namespace ds4::cuda
