// ds4-tokenize: encodes text files with ds4's own tokenizer (byte-level BPE of spec §6, plain
// text: no specials, no BOS) and writes the token ids as little-endian uint32, one file per
// input. Used to build the ds4-nano training and held-out token streams (docs/nano.md), so the
// model is trained on exactly the ids the engine produces at inference time. With --specials the
// special token strings (<｜User｜>, </think>, ...) become their single ids, as in the engine's
// chat path (encode_with_specials), for the chat-formatted training view.
//   ds4-tokenize --vocab models/deepseek-v3-tokenizer.json.zst a.txt b.txt -o out/ [--specials]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/cli_checks.h"
#include "common/error.h"
#include "common/read_file.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"Tokenizes text files with ds4's tokenizer into little-endian uint32 id files.",
               "ds4-tokenize"};
  std::string vocab_path, out_dir;
  std::vector<std::string> inputs;
  bool specials = false;
  app.add_option("--vocab", vocab_path, "tokenizer.json (optionally .zst) of DeepSeek V3/V4")->required();
  app.add_option("-o,--output-dir", out_dir, "Folder for <input stem>.u32 files")->required();
  app.add_flag("--specials", specials, "Recognise special token strings (encode_with_specials)");
  app.add_option("inputs", inputs, "UTF-8 text files")->required()->check(CLI::ExistingFile);
  ds4::parse_or_exit(app, argc, argv);  // usage errors: exit 2
  try {
    ds4::tok::Tokenizer tok(ds4::tok::vocab_from_hf_tokenizer_json(ds4::read_file_maybe_zstd(vocab_path), {}, vocab_path));
    std::filesystem::create_directories(out_dir);
    for (const auto& in : inputs) {
      const std::vector<int32_t> ids = specials ? tok.encode_with_specials(ds4::read_file_maybe_zstd(in))
                                                    : tok.encode_plain(ds4::read_file_maybe_zstd(in));
      const auto out = std::filesystem::path(out_dir) / (std::filesystem::path(in).stem().string() + ".u32");
      std::ofstream f(out, std::ios::binary);
      if (!f) ds4::fail("{}: cannot create", out.string());
      for (int32_t id : ids) {
        const uint32_t v = static_cast<uint32_t>(id);
        const unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                    static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
        f.write(reinterpret_cast<const char*>(b), 4);
      }
      if (!f) ds4::fail("{}: write failed", out.string());
      std::fprintf(stderr, "ds4-tokenize: %s: %zu tokens\n", out.string().c_str(), ids.size());
    }
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "ds4-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
