// Programmatic dependent launch from the kernel's side (sm_90 griddepcontrol), shared by the
// backend's kernels (through kernel_common.cuh) and the CUDA micro-benchmarks. Both calls are
// no-ops before sm_90 and when the kernel was launched without the attribute.
#pragma once

namespace ds4::cuda {

/// Waits until the grids this launch depends on have completed and their writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the dependent launch be scheduled once every block of this grid has called it or exited.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace ds4::cuda
