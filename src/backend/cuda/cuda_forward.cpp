#include "backend/cuda/cuda_forward.h"

#include <algorithm>
#include <cstdint>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

#include <fmt/ranges.h>

#include "backend/cuda/graph_skip.h"
#include "backend/cuda/kernel_timeline.h"
#include "backend/cuda/launch_stream.h"
#include "common/error.h"
#include "model/rope.h"

namespace ds4::cuda {
namespace {

// cos/sin of every position's RoPE angles ([pos][cos n_pair, sin n_pair]) for `p`.
DeviceArray<float> rope_table(const model::RopeParams& p, int64_t ctx) {
  const size_t n_pair = p.n_rot / 2;
  std::vector<float> t(static_cast<size_t>(ctx) * 2 * n_pair);
  for (int64_t pos = 0; pos < ctx; ++pos) {
    float* at = &t[static_cast<size_t>(pos) * 2 * n_pair];
    model::rope_angles(p, static_cast<uint32_t>(pos), {at, n_pair}, {at + n_pair, n_pair});
  }
  DeviceArray<float> d(t.size(), false);
  d.upload(t.data(), t.size());
  return d;
}

// Which of a decode step's streams gets the device's greatest priority (the block scheduler
// dispatches its pending blocks first): the side streams (default: Sinkhorn, compressors,
// shared expert, KV store, indexer), the main chain (DS4_CUDA_STREAM_PRIORITY=main), or
// neither (=0).
enum class StreamPriority { Main, Side, Equal };
StreamPriority stream_priority() {
  const char* v = std::getenv("DS4_CUDA_STREAM_PRIORITY");
  if (v && std::strcmp(v, "0") == 0) return StreamPriority::Equal;
  if (v && std::strcmp(v, "main") == 0) return StreamPriority::Main;
  return StreamPriority::Side;
}

// Where the decode step's KV row norm+RoPE+store runs (DS4_CUDA_KV_MAIN): 0 on the aux stream,
// 1 on the main stream in the layers whose indexer runs (the aux stream then holds the indexer
// alone, the longer path to the attention), 2 always on it; 3 (default; other values too) in
// the query heads' norm+RoPE launch in every layer (no launch of its own, no aux fork where the
// indexer does not run).
int kv_main_mode() {
  const char* v = std::getenv("DS4_CUDA_KV_MAIN");
  for (const char* m : {"0", "1", "2"})
    if (v && std::strcmp(v, m) == 0) return *m - '0';
  return 3;
}

// How much of the indexer's query runs on the main stream before the aux stream forks
// (DS4_CUDA_IDX_QUERY_MAIN): 0 none (its q_b + proj matvecs, RoPE + QAT, scores and top-k all on
// aux), 1 the matvecs, 2 (default; other values too) the matvecs and the RoPE + QAT. On main they
// follow the q_a norm with a PDL edge instead of the aux fork's full one, ahead of q_b.
int idx_query_main_mode() {
  const char* v = std::getenv("DS4_CUDA_IDX_QUERY_MAIN");
  if (v && std::strcmp(v, "0") == 0) return 0;
  if (v && std::strcmp(v, "1") == 0) return 1;
  return 2;
}

// The bits of the colon-separated site names in `list` (bit i: names[i]) of environment
// variable `var`; empty gives none. Throws ds4::Error naming an unknown site and the valid ones.
unsigned parse_site_list(const char* var, std::string_view list, std::span<const std::string_view> names) {
  unsigned bits = 0;
  for (size_t at = 0; !list.empty() && at <= list.size();) {
    const size_t end = std::min(list.find(':', at), list.size());
    const std::string_view name = list.substr(at, end - at);
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) fail("{}: unknown site '{}' (sites: {})", var, name, fmt::join(names, ", "));
    bits |= 1u << (it - names.begin());
    at = end + 1;
  }
  return bits;
}

}  // namespace

unsigned parse_no_pdl_sites(const char* list) {
  static constexpr std::string_view kNames[] = {"hc_pre", "qa_kv", "q_b", "attn", "o_a", "o_b", "router",
                                                "gate_up", "down", "shexp", "comp", "aux", "sinkhorn"};
  static_assert(std::size(kNames) == static_cast<size_t>(NoPdlSite::Count));
  // The shared expert runs on the branch stream beside the router and the routed experts: with
  // PDL its down projection's blocks parked on the SMs while its gate/up launch ran; the KV
  // row's store and the indexer (aux) likewise beside the attention's q path.
  if (list == nullptr)
    return (1u << static_cast<unsigned>(NoPdlSite::Shexp)) | (1u << static_cast<unsigned>(NoPdlSite::Aux));
  return parse_site_list("DS4_CUDA_NO_PDL", list, kNames);
}

unsigned parse_prefetch_sites(const char* list) {
  static constexpr std::string_view kNames[] = {"q", "idx", "o_a", "router", "shexp", "down"};
  static_assert(std::size(kNames) == static_cast<size_t>(PrefetchSite::Count));
  if (list == nullptr) return 0;  // no site gained on an H100 (perf-notes "Session 40")
  return parse_site_list("DS4_CUDA_PREFETCH", list, kNames);
}

CudaForward::CudaForward(const model::Config& c, const DeviceWeights& dw, int64_t ctx,
                         const ExpertShard* shard)
    : c_(c), dw_(dw), ctx_(ctx) {
  if (ctx < 1) fail("context size {} must be at least 1 token", ctx);
  // Limits of the kernels' shared-memory tables (router scores, HC combine matrix).
  if (c.n_expert > 4096) fail("CUDA backend: {} experts exceed the supported 4096", c.n_expert);
  if (c.n_hc > static_cast<uint32_t>(kMaxHcStreams))
    fail("CUDA backend: {} hyper-connection streams exceed the supported {}", c.n_hc, kMaxHcStreams);
  if (c.n_indexer_head > 0 &&
      (c.n_indexer_head > static_cast<uint32_t>(kMaxIndexerHeads) || c.indexer_head_dim < kMinIndexerDim ||
       c.indexer_head_dim > kMaxIndexerDim))
    fail("CUDA backend: an indexer of {} heads x {} values is outside the supported {} heads x {}..{} values",
         c.n_indexer_head, c.indexer_head_dim, kMaxIndexerHeads, kMinIndexerDim, kMaxIndexerDim);
  n_pair_ = static_cast<int>(c.n_rot / 2);
  batch_tokens_ = default_batch_tokens();
  if (env_is_on("DS4_CUDA_PREFILL_PROFILE"))
    pprof_ = std::make_unique<PrefillProfile>();
  use_graphs_ = !env_is_zero("DS4_CUDA_GRAPH");
  graph_skip_regex();  // an invalid DS4_CUDA_GRAPH_SKIP fails here, when the session is made
  KernelTimeline::get();  // DS4_CUDA_TIMELINE: CUPTI's records start before any graph is captured
  attn_rope_fused_ = !env_is_zero("DS4_CUDA_ATTN_ROPE_FUSED");
  attn_q8_fused_ = !env_is_zero("DS4_CUDA_ATTN_Q8_FUSED");
  ob_post_ = !env_is_zero("DS4_CUDA_OB_POST");
  idx_first_ = !env_is_zero("DS4_CUDA_IDX_FIRST");
  kv_main_ = kv_main_mode();
  idx_query_main_ = idx_query_main_mode();
  hc_fused_ = !env_is_zero("DS4_CUDA_HC_FUSED");
  no_pdl_ = parse_no_pdl_sites(std::getenv("DS4_CUDA_NO_PDL"));
  prefetch_ = parse_prefetch_sites(std::getenv("DS4_CUDA_PREFETCH"));
  if (!l2_prefetch_supported()) prefetch_ = 0;
  if (StepClock::requested()) clock_ = std::make_unique<StepClock>();
  if (StepProfile::requested()) {
    prof_ = std::make_unique<StepProfile>();
    use_graphs_ = false;
  }
  if (shard) {
    if (!shard->reducer || shard->begin >= shard->end || shard->end > c.n_expert)
      fail("CUDA expert shard [{}, {}) is invalid for {} experts", shard->begin, shard->end, c.n_expert);
    shard_ = *shard;
    local_sel_ = DeviceArray<int32_t>(c.n_expert_used);
    if (!shard->reducer->graph_safe()) use_graphs_ = false;
  }
  const model::KvEstimate est = model::KvState::estimate(c, ctx);
  raw_cap_ = est.raw_cap;
  const size_t HD = c.head_dim, ID = c.indexer_head_dim;
  kv_.resize(c.n_layer);
  int64_t max_comp = 0;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    DevLayerKv& L = kv_[il];
    L.ratio = c.compress_ratio(il);
    L.raw = DeviceArray<float>(size_t{raw_cap_} * HD);
    if (!L.ratio) continue;
    const int64_t rows = ctx / L.ratio + 2;
    max_comp = std::max(max_comp, rows);
    const size_t coff = L.ratio == 4 ? 2 : 1;
    L.comp = DeviceArray<float>(static_cast<size_t>(rows) * HD);
    L.comp_kv = DeviceArray<float>(coff * L.ratio * coff * HD);
    L.comp_score = DeviceArray<float>(coff * L.ratio * coff * HD);
    if (L.ratio == 4) {
      L.index = DeviceArray<float>(static_cast<size_t>(rows) * ID);
      L.index_kv = DeviceArray<float>(coff * L.ratio * coff * ID);
      L.index_score = DeviceArray<float>(coff * L.ratio * coff * ID);
    }
  }
  max_comp_ = max_comp;
  const model::RopeConfig rc = model::rope_config(c);
  rope_dense_ = rope_table(model::rope_params_for_layer(rc, 0), ctx);
  rope_comp_ = rope_table(model::rope_params_for_layer(rc, 4), ctx);
  pos_ = DeviceArray<int64_t>(1);
  {
    std::vector<int64_t> all(static_cast<size_t>(ctx));
    for (int64_t p = 0; p < ctx; ++p) all[static_cast<size_t>(p)] = p;
    positions_ = DeviceArray<int64_t>(all.size(), false);
    positions_.upload(all.data(), all.size());
  }
  const size_t hc = c.hc_dim(), D = c.n_embd, nh = c.n_hc, U = c.n_expert_used, FF = c.n_ff_exp;
  x_ = DeviceArray<float>(hc);
  x_next_ = DeviceArray<float>(hc);
  flat_ = DeviceArray<float>(hc);
  mix_ = DeviceArray<float>(c.hc_mix());
  pre_ = DeviceArray<float>(nh);
  post_ = DeviceArray<float>(nh);
  comb_ = DeviceArray<float>(nh * nh);
  sub_in_ = DeviceArray<float>(D);
  h_ = DeviceArray<float>(D);
  y_ = DeviceArray<float>(D);
  qr_ = DeviceArray<float>(c.q_lora_rank);
  q_ = DeviceArray<float>(c.q_dim());
  kv_row_ = DeviceArray<float>(HD);
  ck_ = DeviceArray<float>(2 * HD);
  cs_ = DeviceArray<float>(2 * HD);
  iq_ = DeviceArray<float>(std::max<size_t>(c.indexer_q_dim(), 1));
  iw_ = DeviceArray<float>(std::max<uint32_t>(c.n_indexer_head, 1));
  attn_ = DeviceArray<float>(c.q_dim());
  low_ = DeviceArray<float>(c.out_low_dim());
  router_logits_ = DeviceArray<float>(c.n_expert);
  probs_ = DeviceArray<float>(c.n_expert);
  sel_w_ = DeviceArray<float>(U);
  sel_ = DeviceArray<int32_t>(U);
  order_ = DeviceArray<int32_t>(U);
  gate_ = DeviceArray<float>(U * FF);
  up_ = DeviceArray<float>(U * FF);
  mid_ = DeviceArray<float>(U * FF);
  down_ = DeviceArray<float>(U * D);
  sh_down_ = DeviceArray<float>(D);
  sh_gate_ = DeviceArray<float>(FF);
  sh_up_ = DeviceArray<float>(FF);
  sh_mid_ = DeviceArray<float>(FF);
  branch_act_ = DeviceArray<uint8_t>(dw.max_act_bytes);
  aux_act_ = DeviceArray<uint8_t>(dw.max_act_bytes);
  head_pre_ = DeviceArray<float>(nh);
  z_ = DeviceArray<float>(D);
  logits_ = DeviceArray<float>(c.n_vocab);
  logits_host_ = pinned_array<float>(c.n_vocab);
  token_host_ = pinned_array<int32_t>(1);
  row_ = DeviceArray<float>(std::max(HD, ID));
  scores_ = DeviceArray<float>(static_cast<size_t>(std::max<int64_t>(max_comp, 1)));
  top_k_ = DeviceArray<uint32_t>(static_cast<size_t>(std::max<int64_t>(max_comp, 1)) + c.indexer_top_k);
  att_scratch_ = DeviceArray<float>(size_t{c.n_head} * (c.n_swa + static_cast<size_t>(max_comp) + 1));
  act_ = DeviceArray<uint8_t>(dw.max_act_bytes * std::max<size_t>({U, c.n_out_group, 1}));
  if (c.n_embd % 32 == 0) h_q8_0_ = DeviceArray<uint8_t>(c.n_embd / 32 * 36);
  if (c.n_embd % 256 == 0) h_q8_k_ = DeviceArray<uint8_t>(c.n_embd / 256 * 292);
  tokens_ = DeviceArray<int32_t>(static_cast<size_t>(ctx));
  reset();
  // Streams and events last, released here if one cannot be made (the destructor will not run).
  // Priorities (DS4_CUDA_STREAM_PRIORITY): the side streams' blocks are dispatched before the
  // main stream's when SM slots free up, so their work is done before the main chain reaches
  // the join that waits for it (measured +0.4 % over the reverse, +0.8 % over equal: perf-notes).
  int least = 0, greatest = 0;
  cudaError_t st = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  const StreamPriority sp = stream_priority();
  const int main_prio = sp == StreamPriority::Main ? greatest : least;
  const int side_prio = sp == StreamPriority::Side ? greatest : least;
  if (st == cudaSuccess) st = cudaStreamCreateWithPriority(&stream_, cudaStreamDefault, main_prio);
  if (st == cudaSuccess) st = cudaStreamCreateWithPriority(&side_, cudaStreamDefault, side_prio);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&join_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaStreamCreateWithPriority(&branch_, cudaStreamDefault, side_prio);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&branch_fork_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&branch_join_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaStreamCreateWithPriority(&aux_, cudaStreamDefault, side_prio);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&aux_fork_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&aux_join_, cudaEventDisableTiming);
  if (st == cudaSuccess) st = cudaEventCreateWithFlags(&idx_rows_, cudaEventDisableTiming);
  // The prefetches' blocks (one warp each, issue and exit) go before any pending block; only
  // sessions with a DS4_CUDA_PREFETCH site make the stream.
  if (st == cudaSuccess && prefetch_) st = cudaStreamCreateWithPriority(&pf_, cudaStreamDefault, greatest);
  if (st == cudaSuccess && prefetch_) st = cudaEventCreateWithFlags(&pf_fork_, cudaEventDisableTiming);
  if (st == cudaSuccess && prefetch_) st = cudaEventCreateWithFlags(&pf_join_, cudaEventDisableTiming);
  if (st != cudaSuccess) {
    release_streams();
    check(st, "CUDA stream/event creation");
  }
}

void CudaForward::release_streams() {
  for (cudaEvent_t e : {fork_, join_, branch_fork_, branch_join_, aux_fork_, aux_join_, idx_rows_, pf_fork_, pf_join_})
    if (e) cudaEventDestroy(e);
  for (cudaStream_t st : {side_, branch_, aux_, pf_, stream_})
    if (st) cudaStreamDestroy(st);
}

CudaForward::~CudaForward() {
  if (KernelTimeline* tl = KernelTimeline::get()) tl->write();
  if (prof_) std::fputs(prof_->report().c_str(), stderr);
  if (clock_) std::fputs(clock_->report().c_str(), stderr);
  if (pprof_ && pprof_->tokens > 0) {
    static const char* names[5] = {"HC, norms, RoPE, router, combine (batched small kernels)",
                                   "dense multi-token matvecs (attention, shared expert, router, compressors)",
                                   "routed experts (grouping, gate/up/down matmats, SwiGLU)",
                                   "token-by-token loop (KV store, compressors, indexer, attention)",
                                   "output head + logits copy"};
    double total = 0;
    for (double v : pprof_->ms) total += v;
    std::fprintf(stderr, "ds4 CUDA prefill profile: %lld tokens, %.3f ms/token\n",
                 static_cast<long long>(pprof_->tokens), total / static_cast<double>(pprof_->tokens));
    for (int i = 0; i < 5; ++i)
      std::fprintf(stderr, "  %7.3f ms/token %5.1f %%  %s\n", pprof_->ms[i] / static_cast<double>(pprof_->tokens),
                   total > 0 ? 100.0 * pprof_->ms[i] / total : 0.0, names[i]);
    std::vector<std::pair<double, std::string>> ops;
    for (const auto& [name, v] : pprof_->ops) ops.emplace_back(v.first, name);
    std::sort(ops.rbegin(), ops.rend());
    std::fprintf(stderr, "  operations (each synchronised; ms/token, calls, us/call):\n");
    for (const auto& [ms, name] : ops) {
      const int64_t calls = pprof_->ops[name].second;
      std::fprintf(stderr, "  %7.3f %8lld %9.1f  %s\n", ms / static_cast<double>(pprof_->tokens),
                   static_cast<long long>(calls), 1e3 * ms / static_cast<double>(calls), name.c_str());
    }
  }
  for (auto& row : graphs_)
    for (cudaGraphExec_t g : row)
      if (g) cudaGraphExecDestroy(g);
  release_streams();
}

void CudaForward::reset() {
  for (DevLayerKv& L : kv_) {
    check(cudaMemset(L.raw.get(), 0, L.raw.size() * sizeof(float)), "reset");
    L.n_comp = L.n_index = 0;
    L.comp_tokens = L.index_tokens = 0;
    // Frontiers start empty: kv 0, score kCompressorEmptyScore (model::Compressor::reset).
    for (auto* s : {&L.comp_score, &L.index_score}) {
      std::vector<float> empty(s->size(), model::kCompressorEmptyScore);
      s->upload(empty.data(), empty.size());
    }
    for (auto* s : {&L.comp_kv, &L.index_kv})
      if (s->size()) check(cudaMemset(s->get(), 0, s->size() * sizeof(float)), "reset");
  }
}

void CudaForward::eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
                       std::span<float> all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return;
  if (pos0 < 0 || pos0 + n > ctx_)
    fail("positions {}..{} exceed the context of {} tokens", pos0, pos0 + n - 1, ctx_);
  for (int32_t tok : tokens)
    if (tok < 0 || static_cast<uint32_t>(tok) >= c_.n_vocab)
      fail("token id {} is outside the vocabulary [0, {})", tok, c_.n_vocab);
  const size_t V = c_.n_vocab;
  if (!all_logits.empty() && all_logits.size() < static_cast<size_t>(n) * V)
    fail("all_logits buffer too small");
  // A decode step's token goes through page-locked staging on stream_ (the step that returns
  // logits synchronises before the staging is written again); prompts upload synchronously.
  const bool staged = n == 1 && !last_logits.empty() && all_logits.empty();
  if (staged) {
    if (clock_) {
      clock_->enter();
      clock_->queued(stream_);
    }
    token_host_.get()[0] = tokens[0];
    check(cudaMemcpyAsync(tokens_.get() + pos0, token_host_.get(), sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "token copy");
  } else {
    tokens_.upload(tokens.data(), tokens.size(), static_cast<size_t>(pos0));
  }
  if (n > 1 && batch_tokens_ > 1 && !shard_ && !prof_) {
    eval_batched(tokens, pos0, last_logits, all_logits);
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    float* out = nullptr;
    if (!all_logits.empty()) out = &all_logits[t * V];
    else if (t == n - 1 && !last_logits.empty()) out = last_logits.data();
    step(pos0 + t, out);
  }
  if (!all_logits.empty() && !last_logits.empty())
    std::copy_n(&all_logits[(n - 1) * V], V, last_logits.begin());
}

void CudaForward::step(int64_t pos, float* logits) {
  // Host copies of the counters (snapshots): tokens pushed and rows emitted after this step.
  for (DevLayerKv& L : kv_) {
    if (!L.ratio) continue;
    if (static_cast<int64_t>(L.comp_tokens) != pos)
      fail("CUDA compressor: position {} out of order, expected {}", pos, L.comp_tokens);
    L.comp_tokens = static_cast<uint32_t>(pos + 1);
    L.n_comp = (pos + 1) / L.ratio;
    if (L.ratio == 4) {
      L.index_tokens = static_cast<uint32_t>(pos + 1);
      L.n_index = (pos + 1) / 4;
    }
  }
  // The indexer selects rows once a ratio-4 layer has more than top_k of them (spec §3.4.7).
  const bool indexer_on = (pos + 1) / 4 > static_cast<int64_t>(c_.indexer_top_k);
  const bool want_logits = logits != nullptr;
  StreamGuard guard(stream_);
  check(cudaMemcpyAsync(pos_.get(), positions_.get() + pos, sizeof(int64_t), cudaMemcpyDeviceToDevice, stream_),
        "position copy");
  if (prof_) {
    prof_->begin(stream_, 50000);  // 50 ms: the host queues ~1,100 launches + events meanwhile
    launch_step(indexer_on, want_logits);
    prof_->end();
  } else if (!use_graphs_) {
    launch_step(indexer_on, want_logits);
  } else {
    cudaGraphExec_t& exec = graphs_[indexer_on][want_logits];
    if (!exec) {
      cudaGraph_t graph = nullptr;
      check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      launch_step(indexer_on, want_logits);
      check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
      if (KernelTimeline* tl = KernelTimeline::get()) {  // DS4_CUDA_TIMELINE: the graph's nodes and edges
        static int captures = 0;
        tl->add_graph(graph, std::to_string(captures++) + (indexer_on ? "i" : "") + (want_logits ? "l" : ""));
      }
      // Node priorities are the capture streams' (kept only with this flag).
      const cudaError_t st = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
      if (st == cudaSuccess && graph_skip_regex()) {  // what-if timing (graph_skip.h)
        const int n = disable_kernel_nodes(graph, exec, *graph_skip_regex());
        std::fprintf(stderr, "DS4_CUDA_GRAPH_SKIP: %d kernel nodes disabled (results are wrong)\n", n);
      }
      cudaGraphDestroy(graph);
      check(st, "cudaGraphInstantiate");
    }
    check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  }
  const bool timed = clock_ && want_logits;
  if (timed) clock_->launched(stream_);
  if (want_logits)
    check(cudaMemcpyAsync(logits_host_.get(), logits_.get(), c_.n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_),
          "logits copy");
  if (timed) clock_->copied(stream_);
  check(cudaGetLastError(), "forward step");
  if (!want_logits) return;
  check(cudaStreamSynchronize(stream_), "forward step");
  std::memcpy(logits, logits_host_.get(), c_.n_vocab * sizeof(float));
  if (timed) clock_->leave();
}

void CudaForward::launch_step(bool indexer_on, bool logits) {
  const size_t D = c_.n_embd, nh = c_.n_hc;
  // Embedding row looked up on the device, replicated into the n_hc streams (spec §3.2).
  embed(dw_.token_embd.data, dw_.token_embd.type, dw_.token_embd.row_bytes, tokens_.get(), pos_.get(),
        static_cast<int>(nh), static_cast<int64_t>(D), x_.get());
  mark("embed");
  pf_pending_ = false;
  for (uint32_t il = 0; il < c_.n_layer; ++il) {
    attention_layer(il, indexer_on);
    ffn_layer(il);
  }
  if (pf_pending_) {  // a captured graph's streams must all join the origin stream
    check(cudaEventRecord(pf_join_, pf_), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_, pf_join_, 0), "cudaStreamWaitEvent");
  }
  if (logits) {  // output head (spec §3.6)
    hc_norm_mv(dw_.output_hc_fn, x_.get(), head_pre_.get());
    hc_output(head_pre_.get(), dw_.output_hc_scale.get(), dw_.output_hc_base.get(),
              static_cast<int>(nh), c_.hc_eps, x_.get(), static_cast<int64_t>(D), z_.get());
    rms_norm(z_.get(), dw_.output_norm.get(), z_.get(), static_cast<int64_t>(D), 1, c_.rms_eps);
    mark("output_hc+norm");
    mv(dw_.output, z_.get(), logits_.get());
    mark("output (head)");
  }
  // Every layer swaps x_/x_next_ twice, so a step ends on the buffers it started with and a
  // captured graph's pointers stay valid for the next step.
}

void CudaForward::hc_norm_mv(const DevMatrix& fn, const float* x, float* out) {
  const int64_t n = static_cast<int64_t>(c_.hc_dim());
  // Rows too long for hc_norm_matvec's shared memory: the batched kernels for one token (flat_
  // holds its scale). A generic matvec would sum in another order than model::hc_projection.
  if (hc_norm_matvec(fn.type, fn.data, fn.row_bytes, fn.rows, fn.cols, x, c_.rms_eps, out) ||
      hc_norm_matvec_batch(fn.type, fn.data, fn.row_bytes, fn.rows, fn.cols, x, c_.rms_eps, flat_.get(), out, 1))
    return;
  fail("CUDA: the HC projection's {} x {} matrix (ggml type {}) is not supported on the GPU (F32/F16/BF16 "
       "rows of a multiple of 16 values)", fn.rows, n, fn.type);
}

void CudaForward::hc_pre(const DevMatrix& fn, const DeviceArray<float>& scale, const DeviceArray<float>& base,
                         const DeviceArray<float>& norm, std::initializer_list<const DevMatrix*> readers) {
  const int nh = static_cast<int>(c_.n_hc);
  // Only the formats the sublayer reads: the quantization runs in the projection's pre block,
  // on the path to the sublayer's first matvec (in flash no attention matrix reads Q8_K).
  auto read = [&](ActFormat f) {
    for (const DevMatrix* m : readers)
      if (*m && act_format(m->type) == f) return true;
    return false;
  };
  h_has_q8_0_ = h_q8_0_.get() && read(ActFormat::Q8_0);
  h_has_q8_k_ = h_q8_k_.get() && read(ActFormat::Q8_K);
  const HcPreArgs pre = hc_pre_args(scale.get(), base.get(), nh, c_.hc_eps, x_.get(), static_cast<int64_t>(c_.n_embd),
                                    pre_.get(), sub_in_.get(), norm.get(), c_.rms_eps, h_.get(),
                                    h_has_q8_0_ ? h_q8_0_.get() : nullptr, h_has_q8_k_ ? h_q8_k_.get() : nullptr);
  // The pre weights, the sublayer's input and its norm in the projection's pre block, or
  // (matrices hc_norm_matvec does not take, DS4_CUDA_HC_FUSED=0) in a launch of their own.
  bool fused = false;
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::HcPre));
    fused = hc_fused_ && hc_norm_matvec(fn.type, fn.data, fn.row_bytes, fn.rows, fn.cols, x_.get(), c_.rms_eps,
                                        mix_.get(), &pre);
    if (!fused) hc_norm_mv(fn, x_.get(), mix_.get());
  }
  mark(fused ? "hc_pre norm+fn matvec+weights" : "hc_pre norm+fn matvec");
  // The Sinkhorn iterations (post, comb) are only needed by this sublayer's hc_post: they run on
  // the side stream, beside the sublayer, and hc_post waits for them (join_sinkhorn).
  fork(side_, fork_);
  {
    StreamGuard side(side_);
    const PdlOffGuard off(no_pdl(NoPdlSite::Sinkhorn));
    hc_sinkhorn(mix_.get(), scale.get(), base.get(), nh, static_cast<int>(c_.hc_sinkhorn_iter), c_.hc_eps,
                post_.get(), comb_.get());
  }
  check(cudaEventRecord(join_, side_), "cudaEventRecord");
  if (fused) return;
  hc_pre_weights(mix_.get(), pre);
  mark("hc_pre weights+sum+norm");
}

void CudaForward::join_sinkhorn() { check(cudaStreamWaitEvent(stream_, join_, 0), "cudaStreamWaitEvent"); }

void CudaForward::fork(cudaStream_t to, cudaEvent_t ev) {
  check(cudaEventRecord(ev, stream_), "cudaEventRecord");
  check(cudaStreamWaitEvent(to, ev, 0), "cudaStreamWaitEvent");
}

void CudaForward::prefetch(PrefetchSite site, std::initializer_list<L2Range> ranges) {
  if (prof_ || !(prefetch_ >> static_cast<unsigned>(site) & 1u)) return;
  L2Prefetch p;
  for (const L2Range& r : ranges)
    if (r.count > 0 && r.bytes > 0) {
      if (p.n == kL2MaxRanges) fail("CUDA prefetch: more than {} ranges at one site", kL2MaxRanges);
      p.r[p.n++] = r;
    }
  if (p.n == 0) return;
  fork(pf_, pf_fork_);
  StreamGuard guard(pf_);
  l2_prefetch(p);
  pf_pending_ = true;
}

void CudaForward::begin_beside(cudaStream_t s, cudaEvent_t fork_ev, NoPdlSite site) {
  beside_pdl_prev_ = pdl_suppressed();
  pdl_suppressed() = beside_pdl_prev_ || no_pdl(site);
  if (prof_) return;  // profiled steps stay on one stream: one time per operation
  fork(s, fork_ev);
  launch_stream() = s;
}

void CudaForward::end_beside(cudaStream_t s, cudaEvent_t join_ev) {
  pdl_suppressed() = beside_pdl_prev_;
  if (prof_) return;
  check(cudaEventRecord(join_ev, s), "cudaEventRecord");
  launch_stream() = stream_;
}

void CudaForward::join_beside(cudaEvent_t join_ev) {
  if (!prof_) check(cudaStreamWaitEvent(stream_, join_ev, 0), "cudaStreamWaitEvent");
}

// Compressor projection + push (model::Compressor::push, spec §3.4.5/§3.4.7): store, then on
// emit the pooled row is normed, rotated at its first position, quantized, rounded to f16 and
// appended (compressor_push, one launch).
void CudaForward::push_compressor(const DevMatrix& kv_w, const DevMatrix& gate_w,
                                  const DeviceArray<float>& ape, const DeviceArray<float>& norm,
                                  bool indexer, uint32_t r, DeviceArray<float>& state_kv,
                                  DeviceArray<float>& state_score, DeviceArray<float>& rows) {
  pair(op_h(kv_w, ck_.get(), branch_act_.get()), op_h(gate_w, cs_.get(), branch_act_.get()));
  mark(indexer ? "indexer compressor matvecs" : "compressor matvecs");
  const int64_t d = indexer ? c_.indexer_head_dim : c_.head_dim;
  compressor_push(ck_.get(), cs_.get(), ape.get(), r, d, pos_.get(), state_kv.get(), state_score.get(), norm.get(),
                  c_.rms_eps, rope_comp_.get(), n_pair_, indexer, d - c_.n_rot, row_.get(), rows.get());
  mark(indexer ? "indexer compressor store+emit" : "compressor store+emit");
}

void CudaForward::attention_layer(uint32_t il, bool indexer_on) {
  const DevLayer& L = dw_.layers[il];
  DevLayerKv& kv = kv_[il];
  const int64_t D = c_.n_embd, HD = c_.head_dim, QL = c_.q_lora_rank;
  const int nhead = static_cast<int>(c_.n_head);
  const uint32_t ratio = kv.ratio;
  const float* rope = ratio ? rope_comp_.get() : rope_dense_.get();
  const int64_t* pos = pos_.get();

  // Beside the HC projection (latency-bound: DRAM idles), the weights read after it into L2.
  prefetch(PrefetchSite::Q, {whole(L.attn_q_a), whole(L.attn_kv), whole(L.attn_q_b)});
  prefetch(PrefetchSite::Idx, {whole(L.comp_kv), whole(L.comp_gate), whole(L.idx_comp_kv), whole(L.idx_comp_gate),
                               whole(L.idx_q_b), whole(L.idx_proj)});
  hc_pre(L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, L.attn_norm,  // h_ = attn_norm(sub_in)
         {&L.attn_q_a, &L.attn_kv, &L.comp_kv, &L.comp_gate, &L.idx_comp_kv, &L.idx_comp_gate, &L.idx_proj});
  // Compressor and indexer compressor (spec §3.4.5, §3.4.7) read only h_ and their own state:
  // they run on the branch stream beside the query/KV path; the indexer scores and the
  // attention, which read the rows they emit, wait for them (join_branch).
  // The indexer compressor goes first (DS4_CUDA_IDX_FIRST=0: second) and records idx_rows_: the
  // indexer scores on the aux stream wait only for its rows, the attention for both.
  const bool idx_first = ratio == 4 && idx_first_;
  if (ratio) {
    begin_branch(NoPdlSite::Comp);
    auto push_index = [&] {
      push_compressor(L.idx_comp_kv, L.idx_comp_gate, L.idx_comp_ape, L.idx_comp_norm, true, ratio, kv.index_kv,
                      kv.index_score, kv.index);
    };
    if (idx_first) {
      push_index();
      if (!prof_) check(cudaEventRecord(idx_rows_, branch_), "cudaEventRecord");
    }
    push_compressor(L.comp_kv, L.comp_gate, L.comp_ape, L.comp_norm, false, ratio, kv.comp_kv,
                    kv.comp_score, kv.comp);
    if (ratio == 4 && !idx_first) push_index();
    end_branch();
  }
  // Query low-rank input and KV row (spec §3.4.1-2) from the same input, one launch.
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::QaKv));
    pair(op_h(L.attn_q_a, qr_.get()), op_h(L.attn_kv, kv_row_.get()));
  }
  mark("attn_q_a+kv matvecs");
  // The q_a norm also quantizes its output for q_b when q_b reads Q8_0 activations.
  MatvecOp qb = op(L.attn_q_b, qr_.get(), q_.get());
  qb.act_ready = act_format(L.attn_q_b.type) == ActFormat::Q8_0;
  rms_norm(qr_.get(), L.attn_q_a_norm.get(), qr_.get(), QL, 1, c_.rms_eps, qb.act_ready ? qb.act : nullptr);
  mark("attn_q_a norm");
  // Beside q_b and the query norm+RoPE (aux stream): the indexer's scores and top-k, which read
  // qr_, h_ and the indexer rows (spec §3.4.7); its query runs before q_b on the main stream by
  // default. The KV row into the raw ring goes into the query norm+RoPE launch by default
  // (kv_main_mode: DS4_CUDA_KV_MAIN=1 and 2 give it a main-stream launch of its own, 0 the aux
  // stream), so the aux chain is the indexer's alone and other layers fork nothing.
  const bool indexed = ratio == 4 && indexer_on;
  const bool kv_with_q = kv_main_ == 3;
  const bool kv_main = kv_with_q || kv_main_ == 2 || (kv_main_ == 1 && indexed);
  auto kv_store = [&] {
    norm_rope(kv_row_.get(), L.attn_kv_a_norm.get(), HD, 1, c_.rms_eps, rope, n_pair_, pos, c_.nope_dim(),
              kv.raw.get(), raw_cap_);
    mark("kv norm+rope+store");
  };
  // The indexer's query (spec §3.4.7 steps 2-3): its first idx_main parts on the main stream,
  // the rest on aux (DS4_CUDA_IDX_QUERY_MAIN).
  const int64_t ID = c_.indexer_head_dim;
  const int IH = static_cast<int>(c_.n_indexer_head);
  const int idx_main = indexed ? idx_query_main_ : 0;
  auto idx_query = [&](int part) {
    if (part == 0) {
      pair(op(L.idx_q_b, qr_.get(), iq_.get(), aux_act_.get()), op_h(L.idx_proj, iw_.get(), aux_act_.get()));
      mark("indexer q_b+proj matvecs");
    } else {
      indexer_rope_qat(iq_.get(), IH, ID, rope, n_pair_, pos);
      mark("indexer rope+qat");
    }
  };
  for (int part = 0; part < idx_main; ++part) idx_query(part);
  const bool aux_work = indexed || !kv_main;
  if (aux_work) begin_beside(aux_, aux_fork_, NoPdlSite::Aux);
  if (!kv_main) kv_store();
  // Rows attended: window + compressed rows, or window + top_k selected rows (ratio 4, once the
  // layer has more than top_k rows).
  const uint32_t* sel = nullptr;
  int64_t n_sel = 0;
  int64_t max_rows = c_.n_swa;
  if (ratio) max_rows += std::min<int64_t>(ctx_ / ratio + 2, ratio == 4 ? c_.indexer_top_k : INT64_MAX);
  if (indexed) {
    for (int part = idx_main; part < 2; ++part) idx_query(part);
    if (!prof_) check(cudaStreamWaitEvent(aux_, idx_first ? idx_rows_ : branch_join_, 0), "cudaStreamWaitEvent");
    const int64_t max_idx = ctx_ / 4 + 2;
    indexer_scores(iq_.get(), iw_.get(), IH, ID, kv.index.get(), pos, 4, max_idx, scores_.get());
    mark("indexer scores");
    indexer_top_k(scores_.get(), pos, 4, max_idx, c_.indexer_top_k, top_k_.get());
    mark("indexer top-k");
    sel = top_k_.get();
    n_sel = c_.indexer_top_k;
  }
  if (aux_work) end_beside(aux_, aux_join_);
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Qb));
    matvec_op(qb);
  }
  mark("attn_q_b matvec");
  prefetch(PrefetchSite::Oa, {whole(L.attn_output_a)});  // beside the norm+RoPE and the attention
  if (kv_with_q) {
    q_kv_norm_rope(q_.get(), nhead, kv_row_.get(), L.attn_kv_a_norm.get(), HD, c_.rms_eps, rope,
                   n_pair_, pos, c_.nope_dim(), kv.raw.get(), raw_cap_);
    mark("q head + kv norm+rope+store");
  } else {
    if (kv_main) kv_store();
    norm_rope(q_.get(), nullptr, HD, nhead, c_.rms_eps, rope, n_pair_, pos, 0, nullptr, 0);
    mark("q head norm+rope");
  }
  if (aux_work) join_beside(aux_join_);  // the KV row stored, the indexer's selection
  if (ratio) join_branch();  // the compressed rows, this position's included
  // The inverse RoPE of the attention output in its combine launch, or (DS4_CUDA_ATTN_ROPE_FUSED=0,
  // shapes the combine declines) a launch of its own.
  // The combine launch also writes its outputs as o_a's Q8_0 input when o_a reads Q8_0
  // activations (no quantize launch before o_a; DS4_CUDA_ATTN_Q8_FUSED=0: off).
  const int64_t GI = c_.group_in_dim(), OL = c_.o_lora_rank;
  MatvecOp oa = op(L.attn_output_a, attn_.get(), low_.get());
  oa.n_rows = oa.group_rows = OL;
  oa.groups = static_cast<int>(c_.n_out_group);
  oa.x_stride = GI;
  oa.y_stride = OL;
  // Only with the RoPE fused (a null table would tell the combine its outputs are final) and
  // o_a's groups laid out head-major over the attention's outputs.
  const bool q8_out = attn_q8_fused_ && attn_rope_fused_ && act_format(L.attn_output_a.type) == ActFormat::Q8_0 &&
                      L.attn_output_a.cols == GI && GI * oa.groups == nhead * HD;
  SinkAttentionOut att;
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Attn));
    att = sink_attention(q_.get(), L.attn_sinks.get(), nhead, HD, kv.raw.get(), raw_cap_, c_.n_swa, pos, kv.comp.get(),
                         ratio, sel, n_sel, max_rows, att_scratch_.get(), attn_.get(), attn_rope_fused_ ? rope : nullptr,
                         n_pair_, q8_out ? oa.act : nullptr);
  }
  mark(ratio == 0 ? "attention (window)" : ratio == 4 ? "attention (ratio 4)" : "attention (ratio 128)");
  if (!att.roped) {
    rope_tail(attn_.get(), nhead, HD, rope, n_pair_, pos, true);
    mark("attn inverse rope");
  }
  oa.act_ready = att.quantized && att.roped;  // group g's act row: blocks g*GI/32 .. (g+1)*GI/32 - 1
  // Grouped low-rank output projection (spec §3.4.9): group g reads its heads' slice.
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Oa));
    matvec_op(oa);
  }
  mark("attn_output_a matvec");
  // o_b, and the sublayer's hc_post in its epilogue (each row's n_hc state values as the row is
  // stored: one launch and one gap less per layer), or (DS4_CUDA_OB_POST=0) in a launch of its own.
  const HcPostEpi post{x_.get(), post_.get(), comb_.get(), static_cast<int>(c_.n_hc), D, x_next_.get()};
  if (ob_post_) join_sinkhorn();
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Ob));
    MatvecOp ob = op(L.attn_output_b, low_.get(), y_.get());
    if (ob_post_) ob.post = &post;
    matvec_op(ob);
  }
  mark(ob_post_ ? "attn_output_b matvec+hc_post" : "attn_output_b matvec");
  if (!ob_post_) {
    join_sinkhorn();
    hc_post(y_.get(), x_.get(), post_.get(), comb_.get(), static_cast<int>(c_.n_hc), D, x_next_.get());
    mark("hc_post");
  }
  std::swap(x_, x_next_);
}

void CudaForward::ffn_layer(uint32_t il) {
  const DevLayer& L = dw_.layers[il];
  const int64_t D = c_.n_embd, FF = c_.n_ff_exp;
  const int U = static_cast<int>(c_.n_expert_used);
  const float clamp = c_.swiglu_clamp_of(il);

  // Beside the HC projection: the router's matrix, and the shared expert's (on the branch stream).
  prefetch(PrefetchSite::Router, {whole(L.ffn_gate_inp)});
  prefetch(PrefetchSite::Shexp, {whole(L.ffn_gate_shexp), whole(L.ffn_up_shexp), whole(L.ffn_down_shexp)});
  hc_pre(L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, L.ffn_norm,  // h_ = ffn_norm(sub_in)
         {&L.ffn_gate_shexp, &L.ffn_up_shexp, &L.ffn_gate_exps, &L.ffn_up_exps});
  // Shared expert on the branch stream (its own buffers), beside the router and routed experts.
  begin_branch(NoPdlSite::Shexp);
  pair(op_h(L.ffn_gate_shexp, sh_gate_.get(), branch_act_.get()),
       op_h(L.ffn_up_shexp, sh_up_.get(), branch_act_.get()));
  mark("shexp gate+up matvecs");
  swiglu_matvec(op(L.ffn_down_shexp, nullptr, sh_down_.get(), branch_act_.get()), sh_gate_.get(), sh_up_.get(),
                clamp, nullptr, sh_mid_.get());
  mark("swiglu+shexp down matvec");
  end_branch();
  // Router (spec §3.5); expert ids stay on the device.
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Router));
    mv(L.ffn_gate_inp, h_.get(), router_logits_.get());
  }
  mark("router matvec");
  const bool hash = c_.is_hash_layer(il);
  router(router_logits_.get(), static_cast<int>(c_.n_expert),
         L.exp_probs_b.size() ? L.exp_probs_b.get() : nullptr, hash ? L.tid2eid.get() : nullptr,
         tokens_.get(), pos_.get(), U, c_.expert_weight_scale, probs_.get(), sel_.get(), sel_w_.get(),
         order_.get());
  mark("router select");
  // Routed experts: only the rows of experts sel[s] of each stacked tensor are read (with an
  // expert shard, only this rank's experts; the other slots come out as zeros).
  const int32_t* ids = sel_.get();
  if (shard_) {
    localize_experts(sel_.get(), U, static_cast<int>(shard_->begin), static_cast<int>(shard_->end),
                     local_sel_.get());
    ids = local_sel_.get();
  }
  {  // beside the routed gate/up (bound by shared memory, not DRAM): the chosen experts' down rows
    L2Range down;
    down.base = L.ffn_down_exps.data;
    down.bytes = down.stride = static_cast<uint64_t>(D) * L.ffn_down_exps.row_bytes;
    down.ids = ids;
    down.count = U;
    down.id_limit = static_cast<int>(L.ffn_down_exps.rows / D);
    prefetch(PrefetchSite::Down, {down});
  }
  MatvecOp g_op = op_h(L.ffn_gate_exps, gate_.get()), u_op = op_h(L.ffn_up_exps, up_.get());
  for (MatvecOp* o : {&g_op, &u_op}) {
    o->n_rows = o->group_rows = FF;
    o->ids = ids;
    o->groups = U;
    o->y_stride = FF;
  }
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::GateUp));
    pair(g_op, u_op);
  }
  mark("ffn_gate+up_exps matvecs");
  MatvecOp d_op = op(L.ffn_down_exps, nullptr, down_.get());
  d_op.n_rows = d_op.group_rows = D;
  d_op.ids = ids;
  d_op.groups = U;
  d_op.y_stride = D;
  {
    const PdlOffGuard off(no_pdl(NoPdlSite::Down));
    swiglu_matvec(d_op, gate_.get(), up_.get(), clamp, sel_w_.get(), mid_.get());
  }
  mark("swiglu+ffn_down_exps matvec");
  // Expert parallelism: each slot's output row is computed by exactly one rank and is zero on
  // the others, so summing the rows over ranks reproduces every value exactly (x + 0 = x), and
  // the combine below runs in the single-device order on every rank: bit-identical results.
  if (shard_) {
    shard_->reducer->all_reduce(shard_->rank, down_.get(), static_cast<size_t>(U) * D, launch_stream());
    mark("expert all-reduce");
  }
  join_sinkhorn();
  join_branch();  // y = (routed outputs in ascending expert id) + shared
  moe_combine_hc_post(down_.get(), order_.get(), U, D, sh_down_.get(), x_.get(), post_.get(), comb_.get(),
                      static_cast<int>(c_.n_hc), x_next_.get());
  mark("moe combine+hc_post");
  std::swap(x_, x_next_);
}

void CudaForward::export_state(model::KvState& out) const {
  if (out.ctx() != ctx_ || out.layers().size() != kv_.size())
    fail("CUDA export: target state has ctx {} / {} layers, expected {} / {}", out.ctx(),
         out.layers().size(), ctx_, kv_.size());
  check(cudaDeviceSynchronize(), "export");
  const size_t HD = c_.head_dim, ID = c_.indexer_head_dim;
  for (size_t il = 0; il < kv_.size(); ++il) {
    const DevLayerKv& d = kv_[il];
    model::LayerKv& h = out.layers()[il];
    h.raw.resize(d.raw.size());
    d.raw.download(h.raw.data(), h.raw.size());
    if (!d.ratio) continue;
    h.comp.resize(static_cast<size_t>(d.n_comp) * HD);
    d.comp.download(h.comp.data(), h.comp.size());
    std::vector<float> kv(d.comp_kv.size()), sc(d.comp_score.size());
    d.comp_kv.download(kv.data(), kv.size());
    d.comp_score.download(sc.data(), sc.size());
    h.comp_state->restore(kv, sc, d.comp_tokens);
    if (d.ratio != 4) continue;
    h.index.resize(static_cast<size_t>(d.n_index) * ID);
    d.index.download(h.index.data(), h.index.size());
    kv.resize(d.index_kv.size());
    sc.resize(d.index_score.size());
    d.index_kv.download(kv.data(), kv.size());
    d.index_score.download(sc.data(), sc.size());
    h.index_state->restore(kv, sc, d.index_tokens);
  }
}

void CudaForward::import_state(const model::KvState& in) {
  if (in.ctx() != ctx_ || in.raw_cap() != raw_cap_ || in.layers().size() != kv_.size())
    fail("CUDA import: state has ctx {} / {} layers, expected {} / {}", in.ctx(), in.layers().size(),
         ctx_, kv_.size());
  const size_t HD = c_.head_dim, ID = c_.indexer_head_dim;
  for (size_t il = 0; il < kv_.size(); ++il) {
    DevLayerKv& d = kv_[il];
    const model::LayerKv& h = in.layers()[il];
    if (h.ratio != d.ratio || h.raw.size() != d.raw.size())
      fail("CUDA import: layer {} does not match this model", il);
    d.raw.upload(h.raw.data(), h.raw.size());
    if (!d.ratio) continue;
    d.n_comp = static_cast<int64_t>(h.comp.size() / HD);
    d.comp.upload(h.comp.data(), h.comp.size());
    d.comp_kv.upload(h.comp_state->state_kv().data(), h.comp_state->state_kv().size());
    d.comp_score.upload(h.comp_state->state_score().data(), h.comp_state->state_score().size());
    d.comp_tokens = h.comp_state->n_tokens();
    if (d.ratio != 4) continue;
    d.n_index = static_cast<int64_t>(h.index.size() / ID);
    d.index.upload(h.index.data(), h.index.size());
    d.index_kv.upload(h.index_state->state_kv().data(), h.index_state->state_kv().size());
    d.index_score.upload(h.index_state->state_score().data(), h.index_state->state_score().size());
    d.index_tokens = h.index_state->n_tokens();
  }
}

}  // namespace ds4::cuda
