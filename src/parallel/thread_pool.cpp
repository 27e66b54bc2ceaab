#include "parallel/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

namespace ds4::parallel {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waits until done(a) holds: polls for `spin`, then sleeps in a.wait(), announcing it in
// `sleeping` first. A waker changes `a` and then calls a.notify_one() if `sleeping` is set; with
// both sides sequentially consistent, either the waker sees the flag or the sleeper's wait sees
// the new value, so no wake-up is lost.
template <class Done>
void await(std::atomic<uint32_t>& a, Done done, std::chrono::microseconds spin, std::atomic<int>& sleeping) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (uint32_t n = 0;; ++n) {
    const uint32_t v = a.load(std::memory_order_acquire);
    if (done(v)) return;
    if ((n & 15) == 15 && std::chrono::steady_clock::now() >= until) {
      sleeping.store(1);
      a.wait(v);  // returns once a != v (or spuriously): the loop re-tests
      sleeping.store(0);
    } else {
      cpu_relax();
    }
  }
}

void wake(std::atomic<int>& sleeping, std::atomic<uint32_t>& a) {
  if (sleeping.load()) a.notify_one();
}

thread_local int t_region_depth = 0;  // > 0 while this thread runs a region body

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

struct ThreadPool::State {
  struct Worker {
    std::atomic<uint32_t> go{0};  // bumped once per region this worker takes part in (or to stop)
    std::atomic<int> sleeping{0};
    std::thread thread;
  };
  std::chrono::microseconds spin;
  std::mutex region;                // one region at a time on the team
  std::deque<Worker> team;          // worker i runs tid i + 1; deque: stable addresses
  std::atomic<int> started{0};      // team.size(), readable without the region lock
  std::atomic<bool> stop{false};
  // The running region (written before the workers' go bumps, read after them).
  const std::function<void(int, int)>* body = nullptr;
  int nt = 1;
  std::atomic<uint32_t> remaining{0};  // workers of the region still running
  std::atomic<int> caller_sleeping{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  int error_tid = 0;

  void record(int tid, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error || tid < error_tid) {
      error = std::move(e);
      error_tid = tid;
    }
  }

  void work(Worker& w, int tid) {
    uint32_t seen = 0;
    for (;;) {
      await(w.go, [&](uint32_t v) { return v != seen; }, spin, w.sleeping);
      seen = w.go.load(std::memory_order_acquire);
      if (stop.load()) return;
      ++t_region_depth;
      try {
        (*body)(tid, nt);
      } catch (...) {
        record(tid, std::current_exception());
      }
      --t_region_depth;
      if (remaining.fetch_sub(1) == 1) wake(caller_sleeping, remaining);
    }
  }
};

ThreadPool::ThreadPool(std::chrono::microseconds spin) : s_(new State) { s_->spin = spin; }

ThreadPool::~ThreadPool() {
  s_->stop.store(true);
  for (auto& w : s_->team) {
    w.go.fetch_add(1);
    w.go.notify_one();
  }
  for (auto& w : s_->team) w.thread.join();
  delete s_;
}

int ThreadPool::workers() const { return s_->started.load(); }

void ThreadPool::run(int nt, const std::function<void(int, int)>& body) {
  nt = std::max(nt, 1);
  std::unique_lock<std::mutex> lock(s_->region, std::defer_lock);
  if (nt == 1 || t_region_depth > 0 || !lock.try_lock()) {
    // Nested, concurrent with another caller's region, or a single thread: run the bodies here.
    std::exception_ptr first;
    ++t_region_depth;
    for (int tid = 0; tid < nt; ++tid) {
      try {
        body(tid, nt);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    --t_region_depth;
    if (first) std::rethrow_exception(first);
    return;
  }
  State& s = *s_;
  while (static_cast<int>(s.team.size()) < nt - 1) {
    auto& w = s.team.emplace_back();
    const int tid = static_cast<int>(s.team.size());
    try {
      w.thread = std::thread([&s, &w, tid] { s.work(w, tid); });
    } catch (const std::system_error&) {  // no more threads (limits, memory): run with fewer
      s.team.pop_back();
      break;
    }
    s.started.store(static_cast<int>(s.team.size()));
  }
  nt = std::min(nt, static_cast<int>(s.team.size()) + 1);
  s.body = &body;
  s.nt = nt;
  s.error = nullptr;
  s.remaining.store(static_cast<uint32_t>(nt - 1));
  for (int i = 0; i < nt - 1; ++i) {
    s.team[static_cast<size_t>(i)].go.fetch_add(1);
    wake(s.team[static_cast<size_t>(i)].sleeping, s.team[static_cast<size_t>(i)].go);
  }
  ++t_region_depth;
  try {
    body(0, nt);
  } catch (...) {
    s.record(0, std::current_exception());
  }
  --t_region_depth;
  await(s.remaining, [](uint32_t v) { return v == 0; }, s.spin, s.caller_sleeping);
  if (s.error) {
    std::exception_ptr e = std::move(s.error);
    s.error = nullptr;
    std::rethrow_exception(e);
  }
}

ThreadPool& pool() {
  // Never destroyed: its sleeping workers end with the process, so no exit path waits on them.
  static ThreadPool* const p = new ThreadPool();
  return *p;
}

}  // namespace ds4::parallel
