// The CUDA stream every launcher in kernels_*.cu enqueues on (nullptr: the legacy default
// stream). CudaForward points it at its own stream while it runs a step, so a step's launches
// can be captured into a CUDA graph. Per host thread.
#pragma once

#include <cuda_runtime_api.h>

namespace ds4::cuda {

/// The current thread's launch stream (assignable).
cudaStream_t& launch_stream();

}  // namespace ds4::cuda
