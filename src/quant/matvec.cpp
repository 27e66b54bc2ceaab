// Row-parallel matrix-vector product over raw weight rows (see quant.h).
#include <algorithm>
#include <vector>

#include "common/error.h"
#include "parallel/thread_pool.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace ds4::quant {

namespace {

// Rows per thread below which extra threads cost more than they bring.
constexpr int64_t kMinRowsPerThread = 16;

detail::DotFn dot_for(GgmlType type) { return detail::dot_kernel(detail::active_kernels(), type); }

}  // namespace

void matvec_act(GgmlType weight_type, const void* w, int64_t rows, int64_t cols, const void* act,
                float* y, int threads) {
  if (!is_weight_type(weight_type)) {
    fail("matvec: {} cannot be a weight matrix", ggml_type_name(weight_type));
  }
  const size_t stride = row_bytes(weight_type, cols);  // validates cols
  if (rows < 0) fail("matvec: negative row count {}", rows);
  if (threads < 1) fail("matvec: thread count must be >= 1, got {}", threads);
  const detail::DotFn dot = dot_for(weight_type);
  const auto* base = static_cast<const unsigned char*>(w);
  const int nt = static_cast<int>(std::clamp<int64_t>(rows / kMinRowsPerThread, 1, threads));
  if (nt == 1) {
    for (int64_t o = 0; o < rows; ++o) y[o] = dot(base + o * stride, act, cols);
    return;
  }
  parallel::parallel_for(nt, rows, [&](int64_t o, int) { y[o] = dot(base + o * stride, act, cols); });
}

void matvec(GgmlType weight_type, const void* w, int64_t rows, int64_t cols, const float* x,
            float* y, int threads) {
  if (!is_weight_type(weight_type)) {
    fail("matvec: {} cannot be a weight matrix", ggml_type_name(weight_type));
  }
  row_bytes(weight_type, cols);  // validates cols before the activation is quantized
  const ActType at = activation_type(weight_type);
  if (at == ActType::F32) {
    matvec_act(weight_type, w, rows, cols, x, y, threads);
    return;
  }
  // One buffer per calling thread, reused across calls (decode calls matvec many times).
  thread_local std::vector<unsigned char> scratch;
  scratch.resize(act_row_bytes(at, cols));
  quantize_activation(at, x, scratch.data(), cols);
  matvec_act(weight_type, w, rows, cols, scratch.data(), y, threads);
}

}  // namespace ds4::quant
