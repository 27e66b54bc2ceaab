// ds4-make-model: writes a GGUF of the exact ds4 layout with seeded random weights, or with
// trained weights (--weights: ds4-nano, docs/nano.md).
//   ds4-make-model --preset tiny --recipe q2 --vocab models/deepseek-v3-tokenizer.json.zst -o tiny.gguf
//   ds4-make-model --weights models/ds4-nano-weights.gguf.zst --recipe q2 --vocab ... -o nano.gguf
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>

#include "common/cli_checks.h"
#include "common/error.h"
#include "common/read_file.h"
#include "generator.h"
#include "gguf/reader.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace {

// Overrides Config fields from a JSON object: {"n_layer": 4, "compress_ratios": [0,4,128,4], ...}.
void apply_overrides(ds4::model::Config& c, const nlohmann::json& j) {
  if (!j.is_object()) ds4::fail("config file: expected a JSON object");
  const std::pair<const char*, uint32_t*> u32_fields[] = {
      {"n_layer", &c.n_layer}, {"n_embd", &c.n_embd}, {"n_vocab", &c.n_vocab},
      {"n_head", &c.n_head}, {"head_dim", &c.head_dim}, {"value_dim", &c.value_dim},
      {"n_rot", &c.n_rot}, {"q_lora_rank", &c.q_lora_rank}, {"o_lora_rank", &c.o_lora_rank},
      {"n_out_group", &c.n_out_group}, {"n_expert", &c.n_expert},
      {"n_expert_used", &c.n_expert_used}, {"n_ff_exp", &c.n_ff_exp},
      {"n_hash_layer", &c.n_hash_layer}, {"n_swa", &c.n_swa},
      {"n_indexer_head", &c.n_indexer_head}, {"indexer_head_dim", &c.indexer_head_dim},
      {"indexer_top_k", &c.indexer_top_k}, {"n_hc", &c.n_hc},
      {"hc_sinkhorn_iter", &c.hc_sinkhorn_iter}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (auto& [name, field] : u32_fields)
      if (it.key() == name) {
        if (!it->is_number_unsigned()) ds4::fail("config file: '{}' must be a non-negative integer", name);
        *field = it->get<uint32_t>();
        known = true;
      }
    if (it.key() == "compress_ratios") {
      c.compress_ratios = it->get<std::vector<uint32_t>>();
      c.swiglu_clamp.assign(c.compress_ratios.size(), c.swiglu_clamp.empty() ? 10.0f : c.swiglu_clamp[0]);
      known = true;
    }
    if (!known) ds4::fail("config file: unknown key '{}'", it.key());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a DeepSeek V4 GGUF of the exact ds4 layout with seeded random weights.",
               "ds4-make-model"};
  std::string preset = "tiny", recipe_name = "q2", vocab_path = "byte", out, config_file;
  std::string name, weights_path;
  uint32_t vocab_size = 0;
  uint64_t seed = 1;
  bool quiet = false;
  app.add_option("--preset", preset, "Model shape: tiny, nano, flash or pro")
      ->check(CLI::IsMember({"tiny", "nano", "flash", "pro"}));
  app.add_option("--weights", weights_path,
                 "Trained weights GGUF (optionally .zst): shape and tensors come from it, not from --preset")
      ->check(CLI::ExistingFile);
  app.add_option("--recipe", recipe_name, "Quantization recipe: q2, q4 or f32")
      ->check(CLI::IsMember({"q2", "q4", "f32"}));
  app.add_option("--vocab", vocab_path,
                 "tokenizer.json (optionally .zst) of DeepSeek V3/V4, or 'byte' for a byte-level vocabulary");
  app.add_option("--vocab-size", vocab_size,
                 "Vocabulary size (tiny: default 8192 tokens of the real vocabulary, or 512 for 'byte')");
  app.add_option("--config", config_file, "JSON object overriding config fields of the preset")
      ->check(CLI::ExistingFile);
  app.add_option("--seed", seed, "Random seed")->capture_default_str()->check(ds4::whole_number<uint64_t>());
  app.add_option("--name", name, "general.name");
  app.add_flag("-q,--quiet", quiet, "No progress output");
  app.add_option("-o,--output", out, "Output GGUF path")->required();
  ds4::parse_or_exit(app, argc, argv);  // usage errors: exit 2

  try {
    using ds4::model::Config;
    const bool byte = vocab_path == "byte";
    ds4::tools::GenerateOptions o;
    std::optional<ds4::gguf::Reader> weights;
    if (!weights_path.empty()) {
      if (!config_file.empty() || vocab_size) ds4::fail("--weights fixes the shape: drop --config/--vocab-size");
      const std::string bytes = ds4::read_file_maybe_zstd(weights_path);
      weights.emplace(ds4::gguf::Reader::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), weights_path));
      o.config = Config::from_gguf(*weights);
      o.weights = &*weights;
      preset = "nano";
    } else if (preset == "nano") {
      o.config = Config::nano();
      if (vocab_size && vocab_size != o.config.n_vocab)
        ds4::fail("--vocab-size cannot change the nano preset's vocabulary ({})", o.config.n_vocab);
    } else if (preset == "tiny") {
      const uint32_t v = vocab_size ? vocab_size : (byte ? 512 : 8192);
      o.config = Config::tiny(v);
    } else {
      o.config = preset == "flash" ? Config::flash() : Config::pro();
      if (vocab_size && vocab_size != o.config.n_vocab)
        ds4::fail("--vocab-size cannot change the {} preset's vocabulary ({})", preset, o.config.n_vocab);
    }
    if (!config_file.empty()) apply_overrides(o.config, nlohmann::json::parse(ds4::read_file_maybe_zstd(config_file)));
    o.recipe = *ds4::model::parse_recipe(recipe_name);
    if (byte) {
      o.vocab = ds4::tools::byte_vocab(o.config.n_vocab);
    } else {
      const auto full = ds4::tok::vocab_from_hf_tokenizer_json(ds4::read_file_maybe_zstd(vocab_path), {}, vocab_path);
      o.vocab = full.tokens.size() == o.config.n_vocab ? full
                                                       : ds4::tools::shrink_vocab(full, o.config.n_vocab);
    }
    o.seed = seed;
    o.name = name.empty() ? "ds4-" + preset + "-" + recipe_name : name;
    o.progress = !quiet;
    ds4::tools::generate_model(o, out);
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4-make-model: %s\n", e.what());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "ds4-make-model: config file: %s\n", e.what());
    return 1;
  }
  return 0;
}
