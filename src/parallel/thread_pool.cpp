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

thread_local int t_region_depth = 0;  // > 0 while this thread runs a region's chunks

// The region word: workers inside the region in the low bits, kClosed once the caller has taken
// its last chunk (no worker may enter after that).
constexpr uint32_t kClosed = 1u << 31;

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

struct ThreadPool::State {
  struct Worker {
    std::atomic<uint32_t> go{0};  // bumped to call this worker to the region (or to stop)
    std::atomic<int> sleeping{0};
    std::thread thread;
  };
  std::chrono::microseconds spin;
  std::mutex region_lock;           // one region at a time on the team
  std::deque<Worker> team;          // deque: stable addresses
  std::atomic<int> started{0};      // team.size(), readable without the lock
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> region{kClosed};  // see kClosed
  std::atomic<int> caller_sleeping{0};
  // The open region (written while it is closed, read by the workers inside it).
  const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
  int64_t n = 0, grain = 1;
  int nt = 1;
  std::atomic<int64_t> next{0};     // first index of the next chunk to hand out
  std::atomic<int> next_slot{1};
  std::mutex error_mutex;
  std::exception_ptr error;
  int64_t error_lo = 0;

  void record(int64_t lo, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error || lo < error_lo) {
      error = std::move(e);
      error_lo = lo;
    }
  }

  // Takes chunks until none is left.
  void take_chunks(int slot) {
    for (;;) {
      const int64_t lo = next.fetch_add(grain);
      if (lo >= n) return;
      try {
        (*fn)(lo, std::min(lo + grain, n), slot);
      } catch (...) {
        record(lo, std::current_exception());
      }
    }
  }

  void work(Worker& w) {
    uint32_t seen = 0;
    for (;;) {
      await(w.go, [&](uint32_t v) { return v != seen; }, spin, w.sleeping);
      seen = w.go.load(std::memory_order_acquire);
      if (stop.load()) return;
      uint32_t r = region.load();
      bool in = false;
      while (!(r & kClosed) && !in) in = region.compare_exchange_weak(r, r + 1);
      if (!in) continue;  // woke after the region closed: nothing left to do
      const int slot = next_slot.fetch_add(1);
      if (slot < nt) {
        ++t_region_depth;
        take_chunks(slot);
        --t_region_depth;
      }
      if (region.fetch_sub(1) == (kClosed | 1)) wake(caller_sleeping, region);
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

void ThreadPool::for_chunks(int nt, int64_t n, int64_t grain,
                            const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  nt = std::max(nt, 1);
  grain = std::max<int64_t>(grain, 1);
  std::unique_lock<std::mutex> lock(s_->region_lock, std::defer_lock);
  if (nt == 1 || n <= grain || t_region_depth > 0 || !lock.try_lock()) {
    // One chunk, one thread, nested, or beside another caller's region: every chunk here.
    std::exception_ptr first;
    ++t_region_depth;
    for (int64_t lo = 0; lo < n; lo += grain) {
      try {
        fn(lo, std::min(lo + grain, n), 0);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    --t_region_depth;
    if (first) std::rethrow_exception(first);
    return;
  }
  State& s = *s_;
  const int64_t chunks = (n + grain - 1) / grain;
  nt = static_cast<int>(std::min<int64_t>(nt, chunks));
  while (static_cast<int>(s.team.size()) < nt - 1) {
    auto& w = s.team.emplace_back();
    try {
      w.thread = std::thread([&s, &w] { s.work(w); });
    } catch (const std::system_error&) {  // no more threads (limits, memory): run with fewer
      s.team.pop_back();
      break;
    }
    s.started.store(static_cast<int>(s.team.size()));
  }
  nt = std::min(nt, static_cast<int>(s.team.size()) + 1);
  s.fn = &fn;
  s.n = n;
  s.grain = grain;
  s.nt = nt;
  s.next.store(0);
  s.next_slot.store(1);
  s.error = nullptr;
  s.region.store(0);  // open
  for (int i = 0; i < nt - 1; ++i) {
    auto& w = s.team[static_cast<size_t>(i)];
    w.go.fetch_add(1);
    wake(w.sleeping, w.go);
  }
  ++t_region_depth;
  s.take_chunks(0);
  --t_region_depth;
  s.region.fetch_or(kClosed);  // workers that have not entered yet will skip this region
  await(s.region, [](uint32_t v) { return v == kClosed; }, s.spin, s.caller_sleeping);
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
