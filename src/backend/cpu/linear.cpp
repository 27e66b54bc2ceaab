#include "backend/cpu/linear.h"

#include <algorithm>

#include "quant/quant.h"

namespace ds4::cpu {

void matmul(const model::Matrix& w, int64_t row0, int64_t n_rows, const float* x, int64_t x_stride,
            int64_t n_tok, float* y, int64_t y_stride, ActScratch& scratch, int threads) {
  if (n_rows <= 0 || n_tok <= 0) return;
  const quant::ActType at = quant::activation_type(w.type);
  const size_t act_bytes = quant::act_row_bytes(at, w.cols);
  if (scratch.bytes.size() < act_bytes * static_cast<size_t>(n_tok))
    scratch.bytes.resize(act_bytes * static_cast<size_t>(n_tok));
  uint8_t* act = scratch.bytes.data();
  for (int64_t t = 0; t < n_tok; ++t)
    quant::quantize_activation(at, x + t * x_stride, act + static_cast<size_t>(t) * act_bytes, w.cols);

  // Row blocks of 16 keep each thread on contiguous weight bytes; tokens are the inner loop so
  // a block of weight rows is read from memory once per call, whatever the token count.
  constexpr int64_t kBlock = 16;
  const int64_t n_blocks = (n_rows + kBlock - 1) / kBlock;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n_blocks)));
  const GgmlType type = w.type;
  const int64_t cols = w.cols;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t r_end = std::min(n_rows, (b + 1) * kBlock);
    for (int64_t r = b * kBlock; r < r_end; ++r) {
      const uint8_t* wr = w.row(row0 + r);
      for (int64_t t = 0; t < n_tok; ++t)
        y[t * y_stride + r] = quant::vec_dot(type, wr, act + static_cast<size_t>(t) * act_bytes, cols);
    }
  }
}

}  // namespace ds4::cpu
