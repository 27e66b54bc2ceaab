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
    parallel::parallel_ranges(threads, static_cast<int64_t>(bytes), [&](int64_t lo, int64_t hi, int) {
      std::memcpy(dst.get() + lo, src.get() + lo, static_cast<size_t>(hi - lo));
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
