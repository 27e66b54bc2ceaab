// In-kernel phase timing for one-block latency chains (docs/perf-notes.md, session 38): where the
// samplers of Nsight Compute see too few stalls to split a kernel's time, clock64() stamps at
// its phase boundaries do. Compiled in only with -DDS4_CUDA_PHASE_STAMPS (a measurement build:
// `cmake -DCMAKE_CUDA_FLAGS=-DDS4_CUDA_PHASE_STAMPS ...`); otherwise every macro is empty and
// the kernels are unchanged. In a stamped build, thread 0 of a block that asks for it prints
//   PHASE <tag> grid=<blocks> blk=<block> sm_cyc=<total cycles> ns=<total globaltimer ns> d=<c1> <c2> ...
// with d = the cycles of each phase (stamp k minus stamp k-1; a stamp follows a barrier where a
// phase ends for the whole block), for about one launch in eight (sampled on globaltimer so a
// decode run prints a few hundred lines, inside printf's 1 MiB buffer).
#pragma once

#include <cstdint>
#include <cstdio>

namespace ds4::cuda {

/// Per-thread phase stamps: up to kMax clock64() values and the block's start in globaltimer ns.
struct PhaseStamps {
  static constexpr int kMax = 24;
  long long t[kMax];
  unsigned long long g0;
  int n;
};

}  // namespace ds4::cuda

#ifdef DS4_CUDA_PHASE_STAMPS
namespace ds4::cuda {
__device__ __forceinline__ unsigned long long phase_globaltimer() {
  unsigned long long g;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  return g;
}
__device__ __forceinline__ void phase_mark(PhaseStamps* ps) {
  if (ps && ps->n < PhaseStamps::kMax) ps->t[ps->n++] = clock64();
}
static __device__ __noinline__ void phase_print(const PhaseStamps& ps, const char* tag) {
  if (threadIdx.x != 0 || ((ps.g0 >> 12) & 7) != 0) return;
  long long d[PhaseStamps::kMax] = {};
  for (int k = 1; k < ps.n; ++k) d[k - 1] = ps.t[k] - ps.t[k - 1];
  printf("PHASE %s grid=%u blk=%u sm_cyc=%lld ns=%llu d=%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
         "%lld\n",
         tag, gridDim.x, blockIdx.x, ps.t[ps.n - 1] - ps.t[0], phase_globaltimer() - ps.g0, d[0], d[1], d[2], d[3],
         d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17], d[18], d[19],
         d[20], d[21], d[22]);
}
}  // namespace ds4::cuda
/// Starts the block's stamps (the first stamp and the globaltimer start).
#define DS4_PHASE_BEGIN(ps)          \
  ::ds4::cuda::PhaseStamps ps;       \
  ps.n = 0;                          \
  ps.g0 = ::ds4::cuda::phase_globaltimer(); \
  ::ds4::cuda::phase_mark(&ps)
/// Ends a phase (at a point the whole block has passed, or thread 0's own work).
#define DS4_PHASE(ps) ::ds4::cuda::phase_mark(&(ps))
/// The same through a pointer that may be null (a __device__ function shared with unstamped callers).
#define DS4_PHASE_PTR(p) ::ds4::cuda::phase_mark(p)
/// Thread 0 prints the stamps when `cond` holds (and the launch is sampled).
#define DS4_PHASE_PRINT(ps, tag, cond) \
  do {                                 \
    if (cond) ::ds4::cuda::phase_print(ps, tag); \
  } while (0)
#define DS4_PHASE_ADDR(ps) (&(ps))
#else
#define DS4_PHASE_BEGIN(ps) ((void)0)
#define DS4_PHASE(ps) ((void)0)
#define DS4_PHASE_PTR(p) ((void)(p))
#define DS4_PHASE_PRINT(ps, tag, cond) ((void)0)
#define DS4_PHASE_ADDR(ps) nullptr
#endif
