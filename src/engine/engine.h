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
};

class Engine {
 public:
  /// Maps and validates the model and creates the backend. Throws ds4::Error with the file
  /// name and every problem found (bad GGUF, wrong metadata, missing/misshapen tensors, no
  /// vocabulary, an unavailable backend).
  static std::unique_ptr<Engine> open(const EngineOptions& options);

  /// Reads only the vocabulary of a GGUF (for --dump-tokens, which never loads weights).
  static std::unique_ptr<tok::Tokenizer> open_tokenizer(const std::string& model_path);

  const model::Config& config() const { return config_; }
  const model::Weights& weights() const { return weights_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::Reader& reader() const { return reader_; }
  Backend& backend() { return *backend_; }

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
