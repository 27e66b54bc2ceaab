// What ds4-dump-logits computes: every position's next-token logits of a token list on the CPU
// forward pass (optionally in chunks), an optional greedy continuation, and optionally the
// Forward trace of every position, for comparison with tools/reference (parity.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "engine/engine.h"

namespace ds4::dump {

struct DumpRequest {
  std::vector<int32_t> prompt;  ///< token ids, at least one
  int64_t chunk = 0;            ///< prompt evaluation chunk in tokens (0 = all at once)
  int64_t greedy = 0;           ///< greedy tokens to generate after the prompt
  int64_t ctx = 0;              ///< session context (0 = prompt + greedy)
  int threads = 1;              ///< OpenMP threads of the matrix products (>= 1)
};

struct DumpResult {
  std::vector<int32_t> fed;     ///< every token evaluated: prompt, then greedy[0..N-2]
  std::vector<float> logits;    ///< fed.size() x n_vocab f32: row i = logits after fed[i]
  std::vector<int32_t> greedy;  ///< the N generated ids (the last one is not evaluated)
  int64_t n_vocab = 0;
};

/// Index of the largest value, the lowest index on ties; NaN never wins unless every value is
/// NaN (then 0). Throws ds4::Error on an empty span.
int32_t argmax(std::span<const float> logits);

/// Evaluates `req` on a fresh cpu::Forward of `engine`'s model (KV state of req.ctx tokens):
/// the prompt in chunks of req.chunk, then req.greedy greedy steps of one token each (ties to
/// the lowest id), feeding back every generated token but the last. `trace` (may be null)
/// receives the intermediates of every evaluated position. Throws ds4::Error for a negative
/// chunk/greedy/ctx, an empty prompt, a ctx smaller than prompt + greedy - 1, token ids
/// outside the vocabulary, or threads < 1.
DumpResult evaluate(const Engine& engine, const DumpRequest& req, cpu::ForwardTrace* trace);

/// Creates directory `dir` (and its parents) if needed. Throws ds4::Error when it cannot.
void ensure_dir(const std::string& dir);

/// Writes `dir`/tokens.npy (int32 [n_fed]), logits.npy (float32 [n_fed, n_vocab]),
/// greedy.npy (int32 [N], only when N > 0) and meta.json (prompt_len, n_vocab, chunk, greedy,
/// model). Creates `dir` if needed. Throws ds4::Error when a file cannot be written.
void write_result(const std::string& dir, const DumpResult& result, const DumpRequest& req,
                  const std::string& model_path);

}  // namespace ds4::dump
