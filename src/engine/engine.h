// A loaded model ready to run: the mapped GGUF, its validated config and layout, the tokenizer
// built from its vocabulary, the bound weights and a compute backend.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "gguf/reader.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ds4 {

struct EngineOptions {
  std::string model_path;
  std::string backend = "auto";  ///< auto | cpu | cuda
  int threads = 0;               ///< CPU threads; 0 = all cores
  std::string gpu_devices = {};  ///< --gpu-devices "0,1" (empty: device 0); see gpu_plan.h
  std::string gpu_vram = {};     ///< --gpu-vram "auto" or GiB per device (empty: no plan check;
                                 ///< all 0: no CUDA, the CPU backend)
  int64_t plan_ctx = 4096;       ///< context (tokens) the GPU memory plan reserves KV for
  bool cuda_tensor_parallel = false;  ///< --cuda-tensor-parallel: needs two or more devices
};

class Engine {
 public:
  /// Maps and validates the model and creates the backend. With several --gpu-devices (or a
  /// --gpu-vram budget) the GPU placement is planned first (ds4::plan_gpus: expert parallel
  /// over several devices, one device otherwise), printed to stderr ("GPU config: ..."), and
  /// refused when it does not fit. Throws ds4::Error with the file name and every problem found
  /// (bad GGUF, wrong metadata, missing/misshapen tensors, no vocabulary, an unavailable
  /// backend, a bad --gpu-devices/--gpu-vram value, --cuda-tensor-parallel with fewer than two
  /// devices, a plan that does not fit, several --gpu-devices without a usable GPU). With the
  /// default backend and no usable GPU, --gpu-devices 0 or a --gpu-vram budget run on the CPU
  /// and print a note to stderr.
  static std::unique_ptr<Engine> open(const EngineOptions& options);

  /// Reads only the vocabulary of a GGUF (for --dump-tokens, which never loads weights).
  static std::unique_ptr<tok::Tokenizer> open_tokenizer(const std::string& model_path);

  const model::Config& config() const { return config_; }
  const model::Weights& weights() const { return weights_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::Reader& reader() const { return reader_; }
  Backend& backend() { return *backend_; }
  /// The backend's prompt chunk in tokens (Backend::prefill_chunk), for Session::sync.
  int64_t prefill_chunk() const { return backend_->prefill_chunk(); }

 private:
  Engine(gguf::Reader reader) : reader_(std::move(reader)) {}
  gguf::Reader reader_;
  model::Config config_;
  model::Weights weights_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
};

/// Builds the tokenizer from `tokenizer.ggml.tokens`, `.merges` and optional `.token_type`.
/// Throws ds4::Error when the vocabulary is missing or malformed.
std::unique_ptr<tok::Tokenizer> tokenizer_from_gguf(const gguf::Reader& reader);

}  // namespace ds4
