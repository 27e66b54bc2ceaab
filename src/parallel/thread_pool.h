// A team of worker threads for the CPU path's parallel loops (matrix rows, attention heads,
// indexer rows), in place of OpenMP's: libgomp's workers spin ~300k iterations before sleeping,
// which on a machine whose cores other processes also use starves everyone (docs/perf-notes.md,
// "CPU backend on a busy machine": generation 5.5-19 tok/s beside two busy processes, 58-62
// idle). These workers poll for a bounded time (kDefaultSpin) and then sleep on a futex
// (std::atomic::wait), and the caller does the same while it waits for them. Work is handed out
// in chunks as threads ask for it, and a worker that wakes after the region's chunks are all
// taken skips the region, so a thread the scheduler has paused delays a region by at most the
// chunk it holds.
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
/// for_chunks(nt, n, grain, fn) splits [0, n) into chunks [k grain, min((k + 1) grain, n)) and
/// calls fn(lo, hi, slot) exactly once per chunk, on the calling thread (slot 0) and on up to
/// nt - 1 workers (started on first use, kept until destruction); slots are distinct among the
/// threads of a region, all < nt (per-thread scratch). It returns when every chunk is done and
/// no worker is still inside the region. Which thread runs which chunk is not fixed, so fn must
/// give the same result for a chunk whichever runs it (true of every loop in this project: each
/// index is independent). If the system refuses more threads, fewer run. A region started from
/// inside a region, or while another thread's region runs on this pool, runs all its chunks on
/// the calling thread (slot 0). If fn throws, every chunk still runs and the exception of the
/// lowest throwing chunk is rethrown on the caller.
class ThreadPool {
 public:
  /// spin: the bounded poll before sleeping (0: sleep at once).
  explicit ThreadPool(std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// See the class comment. nt < 1 is treated as 1, grain < 1 as 1; n <= 0 does nothing.
  void for_chunks(int nt, int64_t n, int64_t grain, const std::function<void(int64_t lo, int64_t hi, int slot)>& fn);

  /// Workers started so far.
  int workers() const;

 private:
  struct State;
  State* s_;
};

/// The process-wide pool the CPU path uses.
ThreadPool& pool();

/// [0, n) over up to nt threads of pool() in about 4 chunks per thread: fn(lo, hi, slot) once
/// per chunk (slot < nt, distinct among concurrently running threads).
template <class Fn>
void parallel_ranges(int nt, int64_t n, Fn&& fn) {
  const int64_t chunks = 4 * static_cast<int64_t>(nt < 1 ? 1 : nt);
  pool().for_chunks(nt, n, (n + chunks - 1) / chunks, fn);
}

/// As parallel_ranges, one index at a time: fn(i, slot) once per i.
template <class Fn>
void parallel_for(int nt, int64_t n, Fn&& fn) {
  parallel_ranges(nt, n, [&](int64_t lo, int64_t hi, int slot) {
    for (int64_t i = lo; i < hi; ++i) fn(i, slot);
  });
}

}  // namespace ds4::parallel
