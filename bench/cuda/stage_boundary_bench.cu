// bench_cuda_boundary: what one dependent stage boundary of the decode step costs on the GPU,
// three ways, so that the persistent per-layer kernel (docs/cuda-next.md, "what 300 tok/s
// requires") is decided by a number rather than a guess:
//   GraphChain     N kernels in a CUDA graph, each waiting for the whole previous kernel;
//   GraphChainPdl  the same with programmatic dependent launch (the backend's decode step:
//                  weights loaded before griddepcontrol.wait, then the trigger);
//   Persistent     one kernel of N stages with a grid-wide barrier (an arrival counter in
//                  global memory) between dependent stages, the next stage's weights loaded
//                  before its barrier wait.
// Every stage: each of `blocks` blocks (256 threads) streams `kib` KiB of its own "weights"
// (fresh per stage: N x blocks x kib spans far more than L2 when kib > 0) into a sum, waits for
// the previous stage, then writes out[b] = in[(b + 1) % blocks] + 1 (+ 0 x the sum, so the loads
// cannot be dropped): a real dependency between blocks. The value after N stages must be N in
// every block (checked; a wrong value is an error). Reported: microseconds per stage (manual
// time from CUDA events around 10 replays), and the weights' GB/s.
// Without a CUDA device every benchmark is skipped with a message. Debian's Google Benchmark
// library prints "Library was built as DEBUG" about itself: it does not touch these timings,
// which come from CUDA events.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/pdl.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kStages = 64;
constexpr int kReplays = 10;

// Sum of this block's weight slice for one stage: n16 16-byte words per block, 4 in flight per
// thread per iteration (independent loads before the first use).
__device__ float weight_sum(const float4* w, int64_t n16) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n16; i += 4 * kThreads) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * kThreads < n16 ? __ldcs(w + i + u * kThreads) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) s += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  return s;
}

// The block's sum of s (every thread calls it; valid in thread 0). Two calls need a barrier
// between them (thread 0 may still read the first's partial sums).
__device__ float block_sum(float s) {
  __shared__ float red[kThreads / 32];
  for (int off = 16; off >= 1; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  float t = 0.0f;
  if (threadIdx.x == 0)
    for (int k = 0; k < kThreads / 32; ++k) t += red[k];
  return t;
}

// One stage of the chain: weights, the wait, then the dependent write (thread 0).
__global__ void __launch_bounds__(kThreads) stage_kernel(const float* in, float* out, const float4* w, int64_t n16) {
  const float s = weight_sum(w + blockIdx.x * n16, n16);
  ds4::cuda::pdl_wait();
  ds4::cuda::pdl_trigger();
  const float t = block_sum(s);
  if (threadIdx.x == 0) out[blockIdx.x] = __ldcg(in + (blockIdx.x + 1) % gridDim.x) + 1.0f + 0.0f * t;
}

// All stages in one launch; bar counts arrivals (blocks x stages); buf holds stages + 1 rows.
__global__ void __launch_bounds__(kThreads) persistent_kernel(float* buf, const float4* w, int64_t n16, int stages,
                                                              unsigned* bar) {
  const unsigned nb = gridDim.x;
  for (int st = 0; st < stages; ++st) {
    const float s = weight_sum(w + (static_cast<int64_t>(st) * nb + blockIdx.x) * n16, n16);
    if (threadIdx.x == 0 && st > 0) {  // the previous stage complete in every block
      const unsigned want = static_cast<unsigned>(st) * nb;
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
      } while (seen < want);
    }
    __syncthreads();
    const float t = block_sum(s);
    if (threadIdx.x == 0) {
      buf[(st + 1) * nb + blockIdx.x] = __ldcg(buf + st * nb + (blockIdx.x + 1) % nb) + 1.0f + 0.0f * t;
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
    }
  }
}

struct Device {
  bool ok = false;
  int sms = 0;
  std::string why;
};

const Device& device() {
  static const Device d = [] {
    Device r;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      r.why = "no CUDA device";
      return r;
    }
    cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, 0);
    r.ok = true;
    return r;
  }();
  return d;
}

bool fail(benchmark::State& state, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return false;
  state.SkipWithError((std::string(what) + ": " + cudaGetErrorString(e)).c_str());
  return true;
}

enum class Mode { Graph, GraphPdl, Persistent };

// Arguments: blocks per stage as a multiple of the SM count (1 or 2), KiB of weights per block and
// stage.
void run(benchmark::State& state, Mode mode) {
  const Device& dev = device();
  if (!dev.ok) {
    state.SkipWithError(dev.why.c_str());
    return;
  }
  const int nb = static_cast<int>(state.range(0)) * dev.sms;
  if (mode == Mode::Persistent) {  // every block resident at once, or the barrier never opens
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0);
    if (per_sm * dev.sms < nb) {
      state.SkipWithError(("only " + std::to_string(per_sm) + " blocks per SM fit").c_str());
      return;
    }
  }
  const int64_t n16 = state.range(1) * 1024 / 16;
  const size_t wbytes = static_cast<size_t>(kStages) * nb * n16 * 16;
  float4* w = nullptr;
  float* buf = nullptr;
  unsigned* bar = nullptr;
  cudaStream_t st = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  auto cleanup = [&] {
    if (exec) cudaGraphExecDestroy(exec);
    if (st) cudaStreamDestroy(st);
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    cudaFree(w);
    cudaFree(buf);
    cudaFree(bar);
  };
  if (fail(state, cudaMalloc(&w, wbytes > 0 ? wbytes : 16), "cudaMalloc") ||
      fail(state, cudaMemset(w, 0, wbytes > 0 ? wbytes : 16), "cudaMemset") ||
      fail(state, cudaMalloc(&buf, sizeof(float) * (kStages + 1) * nb), "cudaMalloc") ||
      fail(state, cudaMalloc(&bar, sizeof(unsigned)), "cudaMalloc") || fail(state, cudaStreamCreate(&st), "stream") ||
      fail(state, cudaEventCreate(&t0), "event") || fail(state, cudaEventCreate(&t1), "event")) {
    cleanup();
    return;
  }
  if (mode != Mode::Persistent) {  // the chain, captured once
    cudaGraph_t g = nullptr;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    for (int s = 0; s < kStages; ++s) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(static_cast<unsigned>(nb));
      cfg.blockDim = dim3(kThreads);
      cfg.stream = st;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = mode == Mode::GraphPdl ? 1 : 0;
      cudaLaunchKernelEx(&cfg, stage_kernel, static_cast<const float*>(buf + s * nb), buf + (s + 1) * nb,
                         static_cast<const float4*>(w + static_cast<int64_t>(s) * nb * n16), n16);
    }
    if (fail(state, cudaStreamEndCapture(st, &g), "capture") ||
        fail(state, cudaGraphInstantiate(&exec, g, 0), "instantiate")) {
      if (g) cudaGraphDestroy(g);
      cleanup();
      return;
    }
    cudaGraphDestroy(g);
  }
  auto replay = [&] {
    cudaMemsetAsync(buf, 0, sizeof(float) * nb, st);  // stage 0's input
    if (mode == Mode::Persistent) {
      cudaMemsetAsync(bar, 0, sizeof(unsigned), st);
      persistent_kernel<<<nb, kThreads, 0, st>>>(buf, w, n16, kStages, bar);
    } else {
      cudaGraphLaunch(exec, st);
    }
  };
  replay();  // warm-up (clocks, first-touch)
  if (fail(state, cudaStreamSynchronize(st), "warm-up")) {
    cleanup();
    return;
  }
  for (auto _ : state) {
    cudaEventRecord(t0, st);
    for (int r = 0; r < kReplays; ++r) replay();
    cudaEventRecord(t1, st);
    if (fail(state, cudaEventSynchronize(t1), "replay")) break;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, t0, t1);
    state.SetIterationTime(ms / 1e3 / kReplays);
  }
  std::vector<float> last(static_cast<size_t>(nb));
  if (!fail(state, cudaMemcpy(last.data(), buf + kStages * nb, sizeof(float) * nb, cudaMemcpyDeviceToHost), "copy")) {
    for (int b = 0; b < nb; ++b)
      if (const float got = last[static_cast<size_t>(b)]; got != static_cast<float>(kStages)) {
        state.SkipWithError(("block " + std::to_string(b) + " ended at " + std::to_string(got) + ", not " +
                             std::to_string(kStages) + ": a stage ran before its input")
                                .c_str());
        break;
      }
  }
  // kIsRate | kInvert: total seconds / value, i.e. microseconds per stage.
  state.counters["us_per_stage"] = benchmark::Counter(static_cast<double>(state.iterations()) * kStages / 1e6,
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["weights_GBps"] = benchmark::Counter(static_cast<double>(state.iterations()) * wbytes / 1e9,
                                                      benchmark::Counter::kIsRate);
  state.counters["blocks"] = nb;
  cleanup();
}

void BM_GraphChain(benchmark::State& s) { run(s, Mode::Graph); }
void BM_GraphChainPdl(benchmark::State& s) { run(s, Mode::GraphPdl); }
void BM_Persistent(benchmark::State& s) { run(s, Mode::Persistent); }

// Blocks: 1 or 2 per SM (the persistent kernel needs them all resident at once: 256 threads and
// a few registers fit many per SM); KiB per block and stage: 0 (the boundary alone), 8, 32.
void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"blocks_per_sm", "kib"})->ArgsProduct({{1, 2}, {0, 8, 32}});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_GraphChain)->Apply(args);
BENCHMARK(BM_GraphChainPdl)->Apply(args);
BENCHMARK(BM_Persistent)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
