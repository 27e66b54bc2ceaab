// Batched products of a quantized weight matrix with the activations of several tokens, the
// CPU backend's one matrix kernel. Each (row, token) value is the same quant::vec_dot a
// single-token matvec computes, so a prefill of any chunk size gives bit-identical results to
// token-by-token decode; the thread pool splits rows across threads, which does not change any
// value.
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace ds4::cpu {

/// Scratch for quantized activations (reused between calls, grows as needed).
struct ActScratch {
  std::vector<uint8_t> bytes;
};

/// Threads for a product of `n_rows` weight rows of `cols` columns with `n_tok` tokens:
/// at most `threads`, at most one per 16-row block, and at most one per 32 Ki multiply-adds
/// (cols x rows x tokens; a parallel region's fork/join costs about what a core needs for that
/// many).
/// Always >= 1.
int matmul_threads(int64_t cols, int64_t n_rows, int64_t n_tok, int threads);

/// Y[t * y_stride + r] = dot(W row (row0 + r), X[t * x_stride .. + W.cols]) for r in [0, n_rows),
/// t in [0, n_tok). X and Y are f32. Activations are quantized once per token to
/// quant::activation_type(W.type) (F32-activation weights read X in place). Threads: see
/// matmul_threads. Throws ds4::Error on a malformed matrix.
void matmul(const model::Matrix& w, int64_t row0, int64_t n_rows, const float* x, int64_t x_stride,
            int64_t n_tok, float* y, int64_t y_stride, ActScratch& scratch, int threads);

/// matmul over all rows of W.
inline void matmul(const model::Matrix& w, const float* x, int64_t x_stride, int64_t n_tok,
                   float* y, int64_t y_stride, ActScratch& scratch, int threads) {
  matmul(w, 0, w.rows, x, x_stride, n_tok, y, y_stride, scratch, threads);
}

}  // namespace ds4::cpu
