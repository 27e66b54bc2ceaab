#include "backend/cpu/linear.h"

#include <algorithm>

#include "parallel/thread_pool.h"
#include "quant/quant.h"

namespace ds4::cpu {
namespace {

// Row blocks of 16 keep each thread on contiguous weight bytes; tokens are the inner loop so a
// block of weight rows is read from memory once per call, whatever the token count.
constexpr int64_t kBlock = 16;

// A parallel region's fork/join costs a few microseconds (more when the other cores are busy),
// about what one core needs for 32 Ki multiply-adds; each thread gets at least that much work.
// Measured on the tiny models at 2 threads (docs/perf-notes.md): 16-32 Ki is best; 64 Ki keeps
// the 256 x 256 matrices on one thread and loses a third of f32 decode speed.
constexpr uint64_t kMinMacsPerThread = uint64_t{1} << 15;

}  // namespace

int matmul_threads(int64_t cols, int64_t n_rows, int64_t n_tok, int threads) {
  const uint64_t work = static_cast<uint64_t>(std::max<int64_t>(cols, 0)) *
                        static_cast<uint64_t>(std::max<int64_t>(n_rows, 0)) *
                        static_cast<uint64_t>(std::max<int64_t>(n_tok, 1));
  const int64_t blocks = (n_rows + kBlock - 1) / kBlock;
  const auto by_work = static_cast<int64_t>(work / kMinMacsPerThread);
  return static_cast<int>(std::clamp<int64_t>(std::min(by_work, blocks), 1, std::max(threads, 1)));
}

void matmul(const model::Matrix& w, int64_t row0, int64_t n_rows, const float* x, int64_t x_stride,
            int64_t n_tok, float* y, int64_t y_stride, ActScratch& scratch, int threads) {
  if (n_rows <= 0 || n_tok <= 0) return;
  const GgmlType type = w.type;
  const int64_t cols = w.cols;
  const quant::ActType at = quant::activation_type(type);
  // Activations: F32 weights (F32/F16/BF16) read x in place; quantized weights get each token
  // quantized once into the scratch.
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = static_cast<size_t>(x_stride) * sizeof(float);
  if (at != quant::ActType::F32) {
    act_stride = quant::act_row_bytes(at, cols);
    if (scratch.bytes.size() < act_stride * static_cast<size_t>(n_tok))
      scratch.bytes.resize(act_stride * static_cast<size_t>(n_tok));
    for (int64_t t = 0; t < n_tok; ++t)
      quant::quantize_activation(at, x + t * x_stride, scratch.bytes.data() + t * act_stride, cols);
    act = scratch.bytes.data();
  }

  // quant::matvec_act checks its arguments once per call and then runs the same vec_dot kernel
  // row after row, so every (row, token) value equals a single-token matvec's.
  const int nt = matmul_threads(cols, n_rows, n_tok, threads);
  if (n_tok == 1) {
    quant::matvec_act(type, w.row(row0), n_rows, cols, act, y, nt);
    return;
  }
  const int64_t n_blocks = (n_rows + kBlock - 1) / kBlock;
  auto block = [&](int64_t b) {
    const int64_t r = b * kBlock, n = std::min(kBlock, n_rows - r);
    for (int64_t t = 0; t < n_tok; ++t)
      quant::matvec_act(type, w.row(row0 + r), n, cols, act + t * act_stride, y + t * y_stride + r, 1);
  };
  if (nt == 1) {
    for (int64_t b = 0; b < n_blocks; ++b) block(b);
    return;
  }
  parallel::parallel_for(nt, n_blocks, [&](int64_t b, int) { block(b); });
}

}  // namespace ds4::cpu
