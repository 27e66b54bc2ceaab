#include "dump.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/kv_state.h"
#include "npy.h"

namespace ds4::dump {

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) fail("argmax of an empty logit row");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) best = i;
  return static_cast<int32_t>(best);
}

DumpResult evaluate(const Engine& engine, const DumpRequest& req, cpu::ForwardTrace* trace) {
  if (req.prompt.empty()) fail("no prompt tokens");
  if (req.chunk < 0) fail("chunk must be >= 0, got {}", req.chunk);
  if (req.greedy < 0) fail("greedy must be >= 0, got {}", req.greedy);
  if (req.ctx < 0) fail("ctx must be >= 0, got {}", req.ctx);
  if (req.threads < 1) fail("threads must be >= 1, got {}", req.threads);
  const auto n_prompt = static_cast<int64_t>(req.prompt.size());
  const int64_t n_fed = n_prompt + std::max<int64_t>(0, req.greedy - 1);
  const int64_t ctx = req.ctx > 0 ? req.ctx : n_fed;
  if (ctx < n_fed)
    fail("ctx {} is smaller than the {} tokens to evaluate (prompt {} + greedy {} - 1)", ctx, n_fed,
         n_prompt, req.greedy);

  const model::Config& c = engine.config();
  const auto V = static_cast<size_t>(c.n_vocab);
  model::KvState kv(c, ctx);
  cpu::Forward forward(c, engine.weights(), req.threads);
  forward.set_trace(trace);

  DumpResult r;
  r.n_vocab = c.n_vocab;
  r.fed = req.prompt;
  r.logits.resize(static_cast<size_t>(n_fed) * V);
  const int64_t step = req.chunk > 0 ? req.chunk : n_prompt;
  for (int64_t done = 0; done < n_prompt;) {
    const int64_t n = std::min(step, n_prompt - done);
    forward.eval(std::span<const int32_t>(req.prompt).subspan(static_cast<size_t>(done),
                                                              static_cast<size_t>(n)),
                 done, kv, {}, {&r.logits[static_cast<size_t>(done) * V], static_cast<size_t>(n) * V});
    done += n;
  }
  for (int64_t i = 0; i < req.greedy; ++i) {
    const int64_t last = static_cast<int64_t>(r.fed.size()) - 1;
    const int32_t next = argmax({&r.logits[static_cast<size_t>(last) * V], V});
    r.greedy.push_back(next);
    if (i + 1 == req.greedy) break;
    r.fed.push_back(next);
    forward.eval(std::span<const int32_t>(&r.fed.back(), 1), last + 1, kv, {},
                 {&r.logits[static_cast<size_t>(last + 1) * V], V});
  }
  return r;
}

void ensure_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", dir, ec.message());
}

void write_result(const std::string& dir, const DumpResult& result, const DumpRequest& req,
                  const std::string& model_path) {
  ensure_dir(dir);
  const auto n_fed = static_cast<int64_t>(result.fed.size());
  write_npy(dir + "/tokens.npy", result.fed, {n_fed});
  write_npy(dir + "/logits.npy", result.logits, {n_fed, result.n_vocab});
  if (!result.greedy.empty())
    write_npy(dir + "/greedy.npy", result.greedy, {static_cast<int64_t>(result.greedy.size())});
  const nlohmann::json meta = {{"prompt_len", req.prompt.size()}, {"n_vocab", result.n_vocab},
                               {"chunk", req.chunk}, {"greedy", req.greedy},
                               {"model", model_path}};
  const std::string path = dir + "/meta.json";
  std::ofstream f(path, std::ios::trunc);
  f << meta.dump(1) << '\n';
  if (!f) fail("{}: write failed", path);
}

}  // namespace ds4::dump
