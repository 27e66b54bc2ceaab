// Asynchronous global -> shared memory copies (cp.async, sm_80 and later) for the kernels: the
// data never passes through registers, so a thread can keep many loads in flight without the
// register cost (which sets how many blocks share an SM), and without the in-order stall a
// load-then-store loop takes on every iteration. A copy is complete after cp_async_wait() and,
// for data other threads copied, a barrier.
#pragma once

#include <cstdint>

namespace ds4::cuda {

/// Copies 16 bytes; both addresses 16-byte aligned.
__device__ inline void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

/// An L2 policy that makes the lines it loads the first to evict (createpolicy, sm_80 and later),
/// for data a decode step reads once: the weights. Without it, the ~130 MB of weights each layer
/// streams through the 50 MB L2 push out what later launches read again (activations, the KV
/// cache): decode +1.6-1.9 % on an H100 (docs/perf-notes.md, session 39). Not volatile, so the
/// compiler forms it once per kernel.
__device__ __forceinline__ unsigned long long weight_policy() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/// cp_async16 of weight bytes (weight_policy).
__device__ inline void cp_async16_weight(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "l"(weight_policy()));
}

/// A read-only load of weights (as __ldg) under weight_policy.
__device__ __forceinline__ uint4 ldg_weight(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(weight_policy()));
  return v;
}
__device__ __forceinline__ uint2 ldg_weight(const uint2* p) {
  uint2 v;
  asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(weight_policy()));
  return v;
}
__device__ __forceinline__ uint32_t ldg_weight(const uint32_t* p) {
  uint32_t v;
  asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(weight_policy()));
  return v;
}
__device__ __forceinline__ unsigned short ldg_weight(const unsigned short* p) {
  unsigned short v;
  asm("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(weight_policy()));
  return v;
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
