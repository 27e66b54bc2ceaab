// A team of worker threads for the CPU path's parallel loops (matrix rows, attention heads,
// indexer rows), in place of OpenMP's: libgomp's workers spin ~300k iterations before sleeping,
// which on a machine whose cores other processes also use starves everyone (docs/perf-notes.md,
// "CPU backend on a busy machine": generation 5.8 tok/s beside two busy processes, 43-55 idle).
// These workers spin for a bounded time (kDefaultSpin) and then sleep on a futex
// (std::atomic::wait), and the caller does the same while it waits for them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace ds4::parallel {

/// Cores this process may run on (its CPU affinity mask; at least 1).
int available_cores();

/// How long an idle worker (or a caller waiting for its workers) polls before it sleeps: about
/// the gap between two parallel loops of a decode step, so a step keeps its team awake.
inline constexpr std::chrono::microseconds kDefaultSpin{50};

/// A fixed team of threads running one parallel region at a time.
///
/// run(nt, body) calls body(tid, nt) once for each tid in [0, nt): tid 0 on the calling thread,
/// the others on workers (started on first use, kept until destruction), and returns when all
/// have returned. If the system refuses more threads, nt shrinks to what the team has (body
/// sees the smaller nt). A region started from inside a region, or while another thread's region runs
/// on this pool, runs its bodies one after the other on the calling thread (no deadlock, same
/// results for bodies that only partition work by tid). If bodies throw, the first exception
/// (by tid) is rethrown on the caller after every body has finished.
class ThreadPool {
 public:
  /// spin: the bounded poll before sleeping (0: sleep at once).
  explicit ThreadPool(std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Runs body(tid, nt) for tid in [0, nt); nt < 1 is treated as 1. Throws what a body threw.
  void run(int nt, const std::function<void(int tid, int nt)>& body);

  /// Workers started so far (regions of nt threads need nt - 1).
  int workers() const;

 private:
  struct State;
  State* s_;
};

/// The process-wide pool the CPU path uses.
ThreadPool& pool();

/// Static split of [0, n) over nt threads of pool(): thread k calls fn(i, k) for i in
/// [n k / nt, n (k + 1) / nt), like OpenMP's schedule(static) without a chunk size (the split
/// never changes a value in this project: every i is independent).
template <class Fn>
void parallel_for(int nt, int64_t n, Fn&& fn) {
  pool().run(nt, [&](int tid, int team) {
    const int64_t lo = n * tid / team, hi = n * (tid + 1) / team;
    for (int64_t i = lo; i < hi; ++i) fn(i, tid);
  });
}

}  // namespace ds4::parallel
