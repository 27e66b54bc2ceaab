// Asynchronous global -> shared memory copies (cp.async, sm_80 and later) for the kernels: the
// data never passes through registers, so a thread can keep many loads in flight without the
// register cost (which sets how many blocks share an SM), and without the in-order stall a
// load-then-store loop takes on every iteration. A copy is complete after cp_async_wait() and,
// for data other threads copied, a barrier.
#pragma once

namespace ds4::cuda {

/// Copies 16 bytes; both addresses 16-byte aligned.
__device__ inline void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

/// Copies 8 bytes; both addresses 8-byte aligned.
__device__ inline void cp_async8(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src));
}

/// Copies 4 bytes; both addresses 4-byte aligned.
__device__ inline void cp_async4(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}

/// Waits for every copy this thread issued.
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ inline void cp_async_wait() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

}  // namespace ds4::cuda
