#include "cli/logprobs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "common/error.h"
#include "engine/sampler.h"
#include "tokenizer/special_tokens.h"

namespace ds4::cli {
namespace {

nlohmann::json token_json(const tok::Tokenizer& tok, int32_t id) {
  const std::string& piece = tok.token_piece(id);
  std::vector<int> bytes(piece.begin(), piece.end());
  for (int& b : bytes) b &= 0xff;
  return {{"id", id}, {"text", piece}, {"bytes", bytes}};
}

}  // namespace

void dump_logprobs(Engine& engine, Session& session, const std::vector<int32_t>& prompt,
                   int64_t max_tokens, int top_k, const std::string& path) {
  if (static_cast<int64_t>(prompt.size()) >= session.ctx())
    fail("the prompt has {} tokens, but the context size is {} tokens", prompt.size(), session.ctx());
  const auto& tok = engine.tokenizer();
  const auto eos = tok.find_token(tok::kEosToken);
  session.sync(prompt, engine.prefill_chunk());
  nlohmann::json steps = nlohmann::json::array();
  std::vector<int32_t> order(engine.config().n_vocab);
  for (int64_t step = 0; step < max_tokens && session.remaining() > 0; ++step) {
    const auto logits = session.logits();
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    const double lse = mx + std::log(sum);
    std::iota(order.begin(), order.end(), 0);
    const auto k = static_cast<size_t>(std::min<int64_t>(top_k, static_cast<int64_t>(order.size())));
    std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
    const int32_t next = Sampler::argmax(logits);
    nlohmann::json tops = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i)
      tops.push_back({{"token", token_json(tok, order[i])},
                      {"logit", logits[order[i]]},
                      {"logprob", static_cast<double>(logits[order[i]]) - lse}});
    steps.push_back({{"step", step}, {"selected", token_json(tok, next)}, {"top_logprobs", tops}});
    if (eos && next == *eos) break;
    session.decode(next);
  }
  nlohmann::json out = {{"source", "ds4"}, {"prompt_tokens", prompt.size()}, {"ctx", session.ctx()},
                        {"top_k", top_k}, {"steps", steps}};
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot create", path);
  f << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  if (!f) fail("{}: write failed", path);
}

}  // namespace ds4::cli
