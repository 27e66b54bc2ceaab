// The CPU path's thread pool: every chunk of a parallel loop runs exactly once with a private
// slot, exceptions reach the caller, threads that cannot start shrink the team, nested and
// concurrent regions run serially instead of deadlocking, and the sleep / wake hand-over
// survives many short regions (spin 0: every wait sleeps).
#include <gtest/gtest.h>

#include <atomic>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel/thread_pool.h"

namespace ds4::parallel {
namespace {

TEST(ThreadPool, AvailableCoresIsPositive) { EXPECT_GE(available_cores(), 1); }

TEST(ThreadPool, EveryIndexRunsOnceWithASlotBelowNt) {
  for (const int nt : {1, 2, 3, 7}) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_slot{0};
      parallel_for(nt, n, [&](int64_t i, int slot) {
        hits[static_cast<size_t>(i)].fetch_add(1);
        if (slot < 0 || slot >= nt) bad_slot.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "nt " << nt << " n " << n << " i " << i;
      EXPECT_EQ(bad_slot.load(), 0);
    }
  }
}

TEST(ThreadPool, ChunksAreTheGrainAndSlotsAreNeverShared) {
  // 200 chunks of 7 (the last of 3); a slot is never used by two chunks at once (per-thread
  // scratch stays private), and the caller's thread takes part as slot 0.
  ThreadPool p;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<std::atomic<int>> busy(4), chunk_hits(200);
    std::atomic<int> bad{0}, caller_chunks{0};
    const auto caller = std::this_thread::get_id();
    p.for_chunks(4, 1396, 7, [&](int64_t lo, int64_t hi, int slot) {
      if (lo % 7 != 0 || hi != std::min<int64_t>(lo + 7, 1396) || slot < 0 || slot >= 4) bad.fetch_add(1);
      if (busy[static_cast<size_t>(slot)].exchange(1) != 0) bad.fetch_add(1);
      chunk_hits[static_cast<size_t>(lo / 7)].fetch_add(1);
      if (std::this_thread::get_id() == caller && slot != 0) bad.fetch_add(1);
      if (std::this_thread::get_id() == caller) caller_chunks.fetch_add(1);
      busy[static_cast<size_t>(slot)].store(0);
    });
    EXPECT_EQ(bad.load(), 0);
    for (auto& h : chunk_hits) EXPECT_EQ(h.load(), 1);
    EXPECT_GE(caller_chunks.load(), 1);
  }
  EXPECT_LE(p.workers(), 3);
}

TEST(ThreadPool, LowestThrowingChunkReachesTheCallerAfterAllChunks) {
  ThreadPool p;
  std::atomic<int> finished{0};
  try {
    p.for_chunks(4, 40, 1, [&](int64_t lo, int64_t, int) {
      finished.fetch_add(1);
      if (lo >= 17) throw std::runtime_error("chunk " + std::to_string(lo));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk 17");
  }
  EXPECT_EQ(finished.load(), 40);
  std::atomic<int> after{0};
  p.for_chunks(4, 40, 1, [&](int64_t, int64_t, int) { after.fetch_add(1); });  // still usable
  EXPECT_EQ(after.load(), 40);
}

TEST(ThreadPool, NestedRegionsRunSeriallyOnTheCallingThread) {
  ThreadPool p;
  std::atomic<int> inner{0};
  p.for_chunks(3, 3, 1, [&](int64_t, int64_t, int) {
    const auto me = std::this_thread::get_id();
    p.for_chunks(4, 4, 1, [&](int64_t, int64_t, int slot) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      EXPECT_EQ(slot, 0);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, ConcurrentCallersAllComplete) {
  ThreadPool p;
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r) p.for_chunks(3, 6, 1, [&](int64_t lo, int64_t, int) { total.fetch_add(lo + 1); });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * (1 + 2 + 3 + 4 + 5 + 6));
}

TEST(ThreadPool, ManyShortRegionsWithSleepingWorkers) {
  // spin 0: every wait goes to sleep, which exercises the announce / wake hand-over on each region.
  for (const auto spin : {std::chrono::microseconds{0}, kDefaultSpin}) {
    ThreadPool p(spin);
    std::vector<int64_t> sums(3, 0);  // chunk k's sum: one chunk per index, whatever thread runs it
    for (int r = 0; r < 1000; ++r)
      p.for_chunks(3, 3, 1, [&](int64_t lo, int64_t, int) { sums[static_cast<size_t>(lo)] += r; });
    const int64_t want = int64_t{999} * 1000 / 2;
    for (const int64_t s : sums) EXPECT_EQ(s, want);
  }
}

// A process that may not start more threads (its address space capped just above its size, so
// each 8 MB thread stack fails soon) still runs its regions, on the threads it could start.
// Exit codes: 0 ok, 3 cannot set the cap, 4 the team did not shrink, 5 a chunk did not run once.
[[noreturn]] void run_with_capped_address_space() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (64u << 20);
  const rlimit lim{cap, cap};
  if (pages == 0 || setrlimit(RLIMIT_AS, &lim) != 0) std::exit(3);
  ThreadPool p;
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<std::atomic<int>> seen(640);
    p.for_chunks(64, 640, 1, [&](int64_t lo, int64_t, int) { seen[static_cast<size_t>(lo)].fetch_add(1); });
    if (p.workers() < 1 || p.workers() >= 63) std::exit(4);
    for (auto& s : seen)
      if (s.load() != 1) std::exit(5);
  }
  std::exit(0);
}

TEST(ThreadPool, RegionsShrinkWhenThreadsCannotStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_with_capped_address_space(), ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPool, IdleWorkersSleep) {
  // After a region, workers stop polling within the spin time: the process's CPU time stops
  // growing while it sleeps (allowing a little for the runtime itself).
  ThreadPool p;
  p.for_chunks(3, 3, 1, [](int64_t, int64_t, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::clock_t before = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 20.0);  // spinning workers would burn ~400 ms of CPU here
}

}  // namespace
}  // namespace ds4::parallel
