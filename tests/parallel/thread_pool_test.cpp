// The CPU path's thread pool: every index of a parallel loop runs exactly once on the thread the
// static split names, exceptions reach the caller, nested and concurrent regions run serially
// instead of deadlocking, and the sleep / wake hand-over survives many short regions (spin 0:
// every wait sleeps).
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

TEST(ThreadPool, StaticSplitCoversEveryIndexOnceOnItsThread) {
  for (const int nt : {1, 2, 3, 7}) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<int> owner(static_cast<size_t>(n), -1);
      parallel_for(nt, n, [&](int64_t i, int tid) {
        hits[static_cast<size_t>(i)].fetch_add(1);
        owner[static_cast<size_t>(i)] = tid;
      });
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "nt " << nt << " n " << n << " i " << i;
        // OpenMP schedule(static): thread k owns [n k / nt, n (k + 1) / nt).
        int want = 0;
        while (n * (want + 1) / nt <= i) ++want;
        EXPECT_EQ(owner[static_cast<size_t>(i)], want) << "nt " << nt << " n " << n << " i " << i;
      }
    }
  }
}

TEST(ThreadPool, RunGivesEachTidOnceAndWorkersAreReused) {
  ThreadPool p;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::atomic<int>> seen(5);
    std::atomic<int> team_size{0};
    p.run(5, [&](int tid, int nt) {
      seen[static_cast<size_t>(tid)].fetch_add(1);
      team_size.store(nt);
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
    EXPECT_EQ(team_size.load(), 5);
  }
  EXPECT_EQ(p.workers(), 4);
  p.run(0, [](int tid, int nt) { EXPECT_TRUE(tid == 0 && nt == 1); });  // nt < 1 means 1
}

TEST(ThreadPool, BodiesRunOnDistinctThreadsWithTheCallerAsTidZero) {
  ThreadPool p;
  std::vector<std::thread::id> ids(4);
  p.run(4, [&](int tid, int) { ids[static_cast<size_t>(tid)] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = i + 1; j < ids.size(); ++j) EXPECT_NE(ids[i], ids[j]);
}

TEST(ThreadPool, LowestTidExceptionReachesTheCallerAfterAllBodies) {
  ThreadPool p;
  std::atomic<int> finished{0};
  try {
    p.run(4, [&](int tid, int) {
      finished.fetch_add(1);
      if (tid >= 2) throw std::runtime_error("tid " + std::to_string(tid));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tid 2");
  }
  EXPECT_EQ(finished.load(), 4);
  std::atomic<int> after{0};
  p.run(4, [&](int, int) { after.fetch_add(1); });  // still usable
  EXPECT_EQ(after.load(), 4);
}

TEST(ThreadPool, NestedRegionsRunSeriallyOnTheCallingThread) {
  ThreadPool p;
  std::atomic<int> inner{0};
  p.run(3, [&](int, int) {
    const auto me = std::this_thread::get_id();
    p.run(4, [&](int, int nt) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      EXPECT_EQ(nt, 4);
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
      for (int r = 0; r < 200; ++r) p.run(3, [&](int tid, int) { total.fetch_add(tid + 1); });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * (1 + 2 + 3));
}

TEST(ThreadPool, ManyShortRegionsWithSleepingWorkers) {
  // spin 0: every wait goes to sleep, which exercises the announce / wake hand-over on each region.
  for (const auto spin : {std::chrono::microseconds{0}, kDefaultSpin}) {
    ThreadPool p(spin);
    std::vector<int64_t> sums(3, 0);
    for (int r = 0; r < 1000; ++r) p.run(3, [&](int tid, int) { sums[static_cast<size_t>(tid)] += r; });
    const int64_t want = int64_t{999} * 1000 / 2;
    for (const int64_t s : sums) EXPECT_EQ(s, want);
  }
}

// A process that may not start more threads (its address space capped just above its size, so
// each 8 MB thread stack fails soon) still runs its regions, on the threads it could start.
// Exit codes: 0 ok, 3 cannot set the cap, 4 wrong team size, 5 a tid ran the wrong number of times.
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
    std::vector<std::atomic<int>> seen(64);
    int team = 0;
    p.run(64, [&](int tid, int nt) {
      seen[static_cast<size_t>(tid)].fetch_add(1);
      if (tid == 0) team = nt;
    });
    if (team < 1 || team >= 64 || p.workers() != team - 1) std::exit(4);
    for (int t = 0; t < 64; ++t)
      if (seen[static_cast<size_t>(t)].load() != (t < team ? 1 : 0)) std::exit(5);
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
  p.run(3, [](int, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::clock_t before = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 20.0);  // spinning workers would burn ~400 ms of CPU here
}

}  // namespace
}  // namespace ds4::parallel
