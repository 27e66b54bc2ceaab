// This machine's memcpy bandwidth: the reference ds4-bench prints next to the weight bandwidth a
// decode step reaches.
#pragma once

#include <cstddef>

namespace ds4::bench {

/// Copies a `bytes`-sized buffer into another with `threads` threads of parallel::pool() (in
/// contiguous chunks), repeating for at least `min_seconds` of wall time and at least 3 times,
/// and returns the best rate in GB/s (1e9 bytes of source read per second; as many are
/// written). Both buffers are touched before timing, so page faults are not counted.
/// Throws ds4::Error when bytes is 0 or threads < 1.
double memcpy_gbps(size_t bytes, int threads, double min_seconds = 0.2);

}  // namespace ds4::bench
