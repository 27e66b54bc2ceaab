// Model generator behind ds4-make-model: a GGUF of the exact ds4 layout (tensor names, metadata
// keys, quant recipe) with seeded random weights scaled so activations stay O(1) through the
// network. Tensors are produced and written row block by row block, so a full-size Flash file
// streams to disk without being held in memory.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/reader.h"
#include "model/config.h"
#include "model/layout.h"
#include "tokenizer/vocab.h"

namespace ds4::tools {

struct GenerateOptions {
  model::Config config;
  model::Recipe recipe = model::Recipe::q2;
  tok::Vocab vocab;          ///< must have config.n_vocab tokens
  uint64_t seed = 1;
  std::string name = "ds4-generated";
  bool progress = true;      ///< print progress to stderr
  /// Trained weights (e.g. ds4-nano's, docs/nano.md): when set, every tensor is taken from
  /// this file by its GGUF name instead of being random, dequantized (any type quant::
  /// dequantize_row reads) and requantized to the recipe's type; I32 hash tables are copied.
  /// The file must hold exactly the tensors of the layout, with the layout's shapes.
  const gguf::Reader* weights = nullptr;
};

/// Writes the model to `path` (atomically: path.partial then rename). Throws ds4::Error on an
/// invalid config, a vocabulary of the wrong size, an I/O failure, or (with `weights`) a
/// missing, extra, mis-shaped or mis-typed weights tensor (all listed in one error).
void generate_model(const GenerateOptions& options, const std::string& path);

/// A byte-level vocabulary of `n_vocab` tokens: the 256 byte tokens, the special tokens of
/// spec §6.1 (and the other DeepSeek V4 chat markers) typed control, then unused fillers;
/// no merges. Throws ds4::Error when n_vocab is too small to hold them.
tok::Vocab byte_vocab(uint32_t n_vocab);

/// Shrinks a full vocabulary to about `n_vocab` tokens for small test models: keeps the first
/// base tokens, every single-byte token and every control/user-defined token (specials), and
/// the merges whose parts and result are all kept; pads with unused fillers to exactly n_vocab.
/// Throws ds4::Error when n_vocab cannot hold the bytes and specials.
tok::Vocab shrink_vocab(const tok::Vocab& full, uint32_t n_vocab);

}  // namespace ds4::tools
