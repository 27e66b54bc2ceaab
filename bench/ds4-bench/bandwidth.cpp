#include "bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "parallel/thread_pool.h"

namespace ds4::bench {

double memcpy_gbps(size_t bytes, int threads, double min_seconds) {
  if (bytes == 0 || threads < 1) fail("memcpy_gbps: need bytes > 0 and threads >= 1");
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  using clock = std::chrono::steady_clock;
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = clock::now();
    parallel::pool().run(threads, [&](int tid, int team) {
      const size_t nt = static_cast<size_t>(team), id = static_cast<size_t>(tid);
      const size_t lo = bytes * id / nt, hi = bytes * (id + 1) / nt;
      std::memcpy(dst.get() + lo, src.get() + lo, hi - lo);
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  // Read the destination so the copies cannot be dropped as dead stores.
  volatile char sink = dst[bytes - 1];
  (void)sink;
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace ds4::bench
