// The context frontiers a ds4-bench sweep measures (product-surface §5.3).
#pragma once

#include <cstdint>
#include <vector>

namespace ds4::bench {

/// Frontiers from `start` to `max` inclusive, in tokens: with step_mul == 1 each next frontier
/// is the previous + step_incr; with step_mul > 1 it is ceil(previous * step_mul) (at least
/// previous + 1). The last step is clamped so the list always ends with `max`.
/// Example: (2048, 8192, 2048, 1) -> 2048 4096 6144 8192; (100, 1000, -, 3) -> 100 300 900 1000.
/// Throws ds4::Error when start < 1, start > max, step_mul < 1 (or not finite), or step_incr < 1
/// while step_mul == 1.
std::vector<int64_t> frontiers(int64_t start, int64_t max, int64_t step_incr, double step_mul);

}  // namespace ds4::bench
