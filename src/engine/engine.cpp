#include "engine/engine.h"

#include "backend/cpu/cpu_backend.h"
#ifdef DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "common/error.h"
#include "model/layout.h"

namespace ds4 {

std::unique_ptr<tok::Tokenizer> tokenizer_from_gguf(const gguf::Reader& r) {
  tok::Vocab v;
  for (auto s : r.get_string_array("tokenizer.ggml.tokens")) v.tokens.emplace_back(s);
  for (auto s : r.get_string_array("tokenizer.ggml.merges")) v.merges.emplace_back(s);
  if (r.has("tokenizer.ggml.token_type"))
    for (int64_t t : r.get_int_array("tokenizer.ggml.token_type"))
      v.token_types.push_back(static_cast<int32_t>(t));
  try {
    return std::make_unique<tok::Tokenizer>(std::move(v));
  } catch (const Error& e) {
    fail("{}: bad vocabulary: {}", r.name(), e.what());
  }
}

std::unique_ptr<tok::Tokenizer> Engine::open_tokenizer(const std::string& path) {
  return tokenizer_from_gguf(gguf::Reader::open(path));
}

std::unique_ptr<Engine> Engine::open(const EngineOptions& o) {
  std::unique_ptr<Engine> e(new Engine(gguf::Reader::open(o.model_path)));
  e->config_ = model::Config::from_gguf(e->reader_);
  model::validate_layout(e->config_, e->reader_);
  e->tokenizer_ = tokenizer_from_gguf(e->reader_);
  if (e->tokenizer_->n_vocab() != static_cast<int32_t>(e->config_.n_vocab))
    fail("{}: the vocabulary has {} tokens but deepseek4.vocab_size is {}", o.model_path,
         e->tokenizer_->n_vocab(), e->config_.n_vocab);
  e->weights_ = model::bind_weights(e->config_, e->reader_);
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
    fail("unknown backend '{}' (expected auto, cpu or cuda)", o.backend);
#ifdef DS4_HAVE_CUDA
  // --cuda requires a device (make_cuda_backend says why not); auto takes one when present.
  if (o.backend == "cuda" || (o.backend == "auto" && cuda::device_count() > 0)) {
    e->backend_ = cuda::make_cuda_backend(e->config_, e->weights_);
    return e;
  }
#else
  if (o.backend == "cuda") fail("--cuda: this build has no CUDA backend (built without nvcc); use --cpu");
#endif
  e->backend_ = cpu::make_cpu_backend(e->config_, e->weights_, o.threads);
  return e;
}

}  // namespace ds4
