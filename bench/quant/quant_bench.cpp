// bench_quant: matvec y = W x for a 4096 x 4096 weight matrix of every format, reported as GB/s
// of weight bytes (1 GB = 1e9 B), on each ISA this machine runs, with 1 and 2 threads; next to
// memcpy and streaming-read bandwidth of large buffers.
//
// Two residencies: "L3" reuses one matrix (4.3-67 MB: larger than L2, smaller than this
// machine's L3), "DRAM" cycles through copies filling a 1 GiB arena so every call streams its
// weights from memory (the MoE decode situation). Weight contents are random valid blocks
// (finite scales), generated once; the speed does not depend on the values.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/f16.h"
#include "parallel/thread_pool.h"
#include "quant/quant.h"

namespace {

using ds4::GgmlType;
namespace q = ds4::quant;

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 4096;
constexpr size_t kArenaBytes = size_t{1} << 30;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer alloc_bytes(size_t n) {
  return Buffer(static_cast<unsigned char*>(std::aligned_alloc(64, (n + 63) / 64 * 64)));
}

// Random valid blocks: random bytes with the scale fields (or float elements) made finite.
void fill_random_weights(GgmlType type, unsigned char* dst, size_t bytes, std::mt19937_64& rng) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(dst + i, &r, 8);
  }
  std::normal_distribution<float> g(0.0f, 0.02f);
  const auto info = *ds4::ggml_type_info(static_cast<uint32_t>(type));
  const size_t n = bytes / info.block_bytes;
  for (size_t b = 0; b < n; ++b) {
    unsigned char* p = dst + b * info.block_bytes;
    uint16_t h = ds4::f32_to_f16(0.001f + std::abs(g(rng)));
    switch (type) {
      case GgmlType::F32: { const float v = g(rng); std::memcpy(p, &v, 4); break; }
      case GgmlType::F16: h = ds4::f32_to_f16(g(rng)); std::memcpy(p, &h, 2); break;
      case GgmlType::BF16: h = ds4::f32_to_bf16(g(rng)); std::memcpy(p, &h, 2); break;
      case GgmlType::Q8_0: case GgmlType::IQ2_XXS: std::memcpy(p, &h, 2); break;
      case GgmlType::Q4_K: std::memcpy(p, &h, 2); std::memcpy(p + 2, &h, 2); break;
      case GgmlType::Q2_K: std::memcpy(p + 80, &h, 2); std::memcpy(p + 82, &h, 2); break;
      case GgmlType::MXFP4: p[0] = static_cast<unsigned char>(115 + rng() % 10); break;
      default: break;
    }
  }
}

// One 4096 x 4096 matrix per type, generated on first use.
const unsigned char* matrix(GgmlType type) {
  static std::map<GgmlType, Buffer> cache;
  auto it = cache.find(type);
  if (it == cache.end()) {
    const size_t bytes = q::row_bytes(type, kCols) * kRows;
    Buffer b = alloc_bytes(bytes);
    std::mt19937_64 rng(static_cast<uint64_t>(type) + 1);
    fill_random_weights(type, b.get(), bytes, rng);
    it = cache.emplace(type, std::move(b)).first;
  }
  return it->second.get();
}

// A 1 GiB arena shared by the DRAM benchmarks.
unsigned char* arena() {
  static Buffer a = [] {
    Buffer b = alloc_bytes(kArenaBytes);
    std::memset(b.get(), 1, kArenaBytes);  // fault the pages in
    return b;
  }();
  return a.get();
}

void BM_Matvec(benchmark::State& state, GgmlType type, q::Isa isa, int threads, bool dram) {
  q::set_isa(isa);
  const size_t bytes = q::row_bytes(type, kCols) * kRows;
  const unsigned char* one = matrix(type);
  size_t copies = 1;
  if (dram) {
    copies = kArenaBytes / bytes;
    for (size_t c = 0; c < copies; ++c) std::memcpy(arena() + c * bytes, one, bytes);
  }
  std::vector<float> x(kCols), y(kRows);
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  size_t c = 0;
  for (auto _ : state) {
    const unsigned char* w = dram ? arena() + (c++ % copies) * bytes : one;
    q::matvec(type, w, kRows, kCols, x.data(), y.data(), threads);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

// memcpy of `bytes` (split over `threads` threads of parallel::pool()); GB/s counts the bytes
// read (the same number is written).
void BM_Memcpy(benchmark::State& state, size_t bytes, int threads) {
  static Buffer dst = alloc_bytes(kArenaBytes / 2);
  std::memset(dst.get(), 2, kArenaBytes / 2);
  const unsigned char* src = arena();
  for (auto _ : state) {
    ds4::parallel::parallel_ranges(threads, static_cast<int64_t>(bytes), [&](int64_t lo, int64_t hi, int) {
      std::memcpy(dst.get() + lo, src + lo, static_cast<size_t>(hi - lo));
    });
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

// Streaming read (sum of 64-bit words) of `bytes`: the access pattern of a matvec's weights.
void BM_Read(benchmark::State& state, size_t bytes, int threads) {
  const auto* src = reinterpret_cast<const uint64_t*>(arena());
  const size_t words = bytes / 8;
  for (auto _ : state) {
    std::atomic<uint64_t> total{0};
    ds4::parallel::parallel_ranges(threads, static_cast<int64_t>(words), [&](int64_t lo, int64_t hi, int) {
      uint64_t t = 0;
      for (int64_t i = lo; i < hi; ++i) t += src[i];
      total.fetch_add(t);
    });
    uint64_t sum = total.load();
    benchmark::DoNotOptimize(sum);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,     GgmlType::BF16,
                            GgmlType::Q8_0, GgmlType::Q2_K,    GgmlType::Q4_K,
                            GgmlType::IQ2_XXS, GgmlType::MXFP4};
  for (int threads : {1, 2}) {
    for (size_t mb : {16, 512}) {
      const std::string where = mb == 16 ? "L3" : "DRAM";
      benchmark::RegisterBenchmark(("memcpy/" + where + "/" + std::to_string(mb) + "MiB/threads:" +
                                    std::to_string(threads)).c_str(),
                                   BM_Memcpy, mb << 20, threads)->UseRealTime();
      benchmark::RegisterBenchmark(("read/" + where + "/" + std::to_string(mb) + "MiB/threads:" +
                                    std::to_string(threads)).c_str(),
                                   BM_Read, mb << 20, threads)->UseRealTime();
    }
  }
  for (bool dram : {false, true}) {
    for (GgmlType type : types) {
      for (q::Isa isa : {q::Isa::Scalar, q::Isa::Avx2, q::Isa::Avx512}) {
        if (!q::isa_supported(isa)) continue;
        for (int threads : {1, 2}) {
          const std::string name = std::string("matvec/") + (dram ? "DRAM/" : "L3/") +
                                   ds4::ggml_type_name(type) + "/" + q::isa_name(isa) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, type, isa, threads, dram)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
