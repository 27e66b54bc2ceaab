#include "frontiers.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace ds4::bench {

std::vector<int64_t> frontiers(int64_t start, int64_t max, int64_t step_incr, double step_mul) {
  if (start < 1 || start > max) fail("frontiers: need 1 <= start ({}) <= max ({})", start, max);
  if (!std::isfinite(step_mul) || step_mul < 1.0) fail("frontiers: step_mul {} must be >= 1", step_mul);
  if (step_mul == 1.0 && step_incr < 1) fail("frontiers: step_incr {} must be >= 1", step_incr);
  std::vector<int64_t> out{start};
  while (out.back() < max) {
    const int64_t cur = out.back();
    int64_t next;
    if (step_mul == 1.0) {
      next = step_incr > max - cur ? max : cur + step_incr;
    } else {
      const double v = std::ceil(static_cast<double>(cur) * step_mul);
      next = v >= static_cast<double>(max) ? max : std::max(cur + 1, static_cast<int64_t>(v));
    }
    out.push_back(next);
  }
  return out;
}

}  // namespace ds4::bench
