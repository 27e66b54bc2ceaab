#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <random>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/device_weights.h"
#include "common/error.h"
#include "quant/iq2xxs_tables.h"
#include "quant/mxfp4_tables.h"

namespace ds4::cuda {
namespace {

class CudaSession final : public BackendSession {
 public:
  CudaSession(const model::Config& c, const DeviceWeights& dw, int device, int64_t ctx)
      : device_(device), forward_((select(device), c), dw, ctx) {}

  void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
            std::span<float> all_logits) override {
    select(device_);
    forward_.eval(tokens, pos0, last_logits, all_logits);
  }
  void reset() override {
    select(device_);
    forward_.reset();
  }
  void export_state(model::KvState& out) const override {
    select(device_);
    forward_.export_state(out);
  }
  void import_state(const model::KvState& in) override {
    select(device_);
    forward_.import_state(in);
  }
  int64_t ctx() const override { return forward_.ctx(); }

  static void select(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

 private:
  int device_;
  CudaForward forward_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const model::Config& c, const model::Weights& w, int device,
              const std::function<void(uint64_t, uint64_t)>& progress)
      : c_(c), device_(device), dw_((CudaSession::select(device), c), w, 0, 0, progress) {}
  CudaBackend(const model::Config& c, model::Recipe recipe, uint64_t seed, int device)
      : c_(c), device_(device), dw_((CudaSession::select(device), c), recipe, seed) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<BackendSession> new_session(int64_t ctx) override {
    return std::make_unique<CudaSession>(c_, dw_, device_, ctx);
  }
  int64_t prefill_chunk() const override { return CudaForward::default_batch_tokens(); }
  const model::Config& config() const { return c_; }
  const DeviceWeights& weights() const { return dw_; }
  int device() const { return device_; }

 private:
  model::Config c_;
  int device_;
  DeviceWeights dw_;
};

}  // namespace

void prepare_device(int device) {
  const int n = device_count();
  if (n == 0) fail("--cuda (--backend cuda): no CUDA device is available (no GPU or no working NVIDIA driver)");
  if (device < 0 || device >= n) fail("--cuda (--backend cuda): device {} does not exist ({} device(s) present)", device, n);
  CudaSession::select(device);
  if (!upload_quant_tables(quant::kIq2xxs.grid, quant::kMxfp4.doubled,
                           quant::kMxfp4.half_scale))
    fail("CUDA backend: cannot upload the quantization tables to the device");
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(const model::Config& config,
                                           const model::Weights& weights,
                                           const CudaOptions& options) {
  prepare_device(options.device);
  return std::make_unique<CudaBackend>(config, weights, options.device, options.progress);
}

uint64_t prefill_scratch_bytes(const model::Config& c) {
  const uint64_t widest = std::max<uint64_t>({c.n_embd, c.q_lora_rank, c.group_in_dim(), c.out_low_dim(), c.n_ff_exp});
  const uint64_t act = (widest + 255) / 256 * 292;  // Q8_K blocks: 292 bytes per 256 values
  return CudaForward::batch_scratch_bytes(c, act, CudaForward::default_batch_tokens());
}

std::pair<uint64_t, uint64_t> device_memory(int device) {
  prepare_device(device);
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return {free_b, total_b};
}

synth::MemoryPlan synthetic_plan(const synth::SyntheticSpec& spec, int64_t ctx) {
  return synth::plan_memory(
      spec.config, [&](const model::TensorSpec& s) { return model::recipe_type(s, spec.recipe); }, ctx);
}

std::unique_ptr<Backend> make_synthetic_backend(const synth::SyntheticSpec& spec,
                                                const SyntheticOptions& options) {
  const synth::MemoryPlan plan = synthetic_plan(spec, options.ctx);
  const auto [free_b, total_b] = device_memory(options.device);
  (void)total_b;
  synth::check_fits(plan, free_b, options.gpu_vram_gib, "synthetic " + spec.name);
  return std::make_unique<CudaBackend>(spec.config, spec.recipe, options.seed, options.device);
}

namespace {

/// Median device time (seconds) of `reps` runs of `work` after one warm-up, CUDA events.
double time_median(int reps, const std::function<void()>& work) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  work();
  std::vector<double> t;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    check(cudaEventRecord(a), "cudaEventRecord");
    work();
    check(cudaEventRecord(b), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms * 1e-3);
  }
  check(cudaGetLastError(), "profiled kernels");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

double copy_bandwidth_gbps(int device, size_t bytes) {
  prepare_device(device);
  DeviceArray<uint8_t> src(bytes, false), dst(bytes, false);
  check(cudaMemset(src.get(), 0x5a, bytes), "cudaMemset");
  const double s = time_median(5, [&] {
    check(cudaMemcpy(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
  });
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

std::vector<MatvecRate> profile_matvecs(Backend& backend, int reps) {
  auto* cb = dynamic_cast<CudaBackend*>(&backend);
  if (!cb) fail("profile_matvecs: backend '{}' is not a CUDA backend", backend.name());
  CudaSession::select(cb->device());
  const model::Config& c = cb->config();
  const DeviceWeights& dw = cb->weights();
  // Random activations (never zeros), large enough for any matrix's input, and expert ids.
  size_t max_cols = 0;
  for (const DevLayer& L : dw.layers)
    for (const DevMatrix* m : {&L.hc_attn_fn, &L.attn_q_b, &L.attn_output_a, &L.attn_output_b})
      max_cols = std::max<size_t>(max_cols, static_cast<size_t>(m->cols) * c.n_out_group);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hx(max_cols);
  for (float& v : hx) v = nd(rng);
  DeviceArray<float> x(hx.size()), y(std::max<size_t>(c.n_vocab, size_t{c.n_ff_exp} * c.n_expert_used * 4));
  x.upload(hx.data(), hx.size());
  std::vector<int32_t> hid(c.n_expert_used);
  for (size_t i = 0; i < hid.size(); ++i) hid[i] = static_cast<int32_t>((i * 37 + 11) % c.n_expert);
  DeviceArray<int32_t> ids(hid.size());
  ids.upload(hid.data(), hid.size());
  DeviceArray<uint8_t> act(dw.max_act_bytes * std::max<size_t>({c.n_expert_used, c.n_out_group, 1}));

  struct Kind {
    std::string name;
    std::function<const DevMatrix&(const DevLayer&)> get;
    int mode;  // 0 plain, 1 grouped output_a, 2 routed experts
  };
  const std::vector<Kind> kinds = {
      {"hc_attn_fn", [](const DevLayer& L) -> const DevMatrix& { return L.hc_attn_fn; }, 0},
      {"attn_q_a", [](const DevLayer& L) -> const DevMatrix& { return L.attn_q_a; }, 0},
      {"attn_q_b", [](const DevLayer& L) -> const DevMatrix& { return L.attn_q_b; }, 0},
      {"attn_kv", [](const DevLayer& L) -> const DevMatrix& { return L.attn_kv; }, 0},
      {"attn_compressor_kv", [](const DevLayer& L) -> const DevMatrix& { return L.comp_kv; }, 0},
      {"attn_compressor_gate", [](const DevLayer& L) -> const DevMatrix& { return L.comp_gate; }, 0},
      {"indexer.attn_q_b", [](const DevLayer& L) -> const DevMatrix& { return L.idx_q_b; }, 0},
      {"indexer.proj", [](const DevLayer& L) -> const DevMatrix& { return L.idx_proj; }, 0},
      {"indexer_compressor_kv", [](const DevLayer& L) -> const DevMatrix& { return L.idx_comp_kv; }, 0},
      {"indexer_compressor_gate", [](const DevLayer& L) -> const DevMatrix& { return L.idx_comp_gate; }, 0},
      {"attn_output_a", [](const DevLayer& L) -> const DevMatrix& { return L.attn_output_a; }, 1},
      {"attn_output_b", [](const DevLayer& L) -> const DevMatrix& { return L.attn_output_b; }, 0},
      {"ffn_gate_inp", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_gate_inp; }, 0},
      {"hc_ffn_fn", [](const DevLayer& L) -> const DevMatrix& { return L.hc_ffn_fn; }, 0},
      {"ffn_gate_exps", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_gate_exps; }, 2},
      {"ffn_up_exps", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_up_exps; }, 2},
      {"ffn_down_exps", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_down_exps; }, 2},
      {"ffn_gate_shexp", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_gate_shexp; }, 0},
      {"ffn_up_shexp", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_up_shexp; }, 0},
      {"ffn_down_shexp", [](const DevLayer& L) -> const DevMatrix& { return L.ffn_down_shexp; }, 0},
  };
  std::vector<MatvecRate> out;
  for (const Kind& k : kinds) {
    MatvecRate r;
    r.name = k.name;
    std::vector<const DevMatrix*> ms;
    for (const DevLayer& L : dw.layers)
      if (const DevMatrix& m = k.get(L)) ms.push_back(&m);
    if (ms.empty()) continue;
    r.type = ggml_type_name(ms[0]->type);
    r.calls = static_cast<int>(ms.size());
    const int U = static_cast<int>(c.n_expert_used);
    const int64_t OL = c.o_lora_rank, FF = c.n_ff_exp, D = c.n_embd;
    for (const DevMatrix* m : ms) {
      const uint64_t rb = m->row_bytes;
      if (k.mode == 2) r.bytes += rb * static_cast<uint64_t>(m->rows / c.n_expert) * U;
      else r.bytes += rb * static_cast<uint64_t>(m->rows);
    }
    r.seconds = time_median(reps, [&] {
      for (const DevMatrix* m : ms) {
        if (k.mode == 0) {
          matvec(*m, 0, m->rows, 0, nullptr, 1, x.get(), 0, y.get(), 0, act.get());
        } else if (k.mode == 1) {
          matvec(*m, 0, OL, OL, nullptr, static_cast<int>(c.n_out_group), x.get(), m->cols, y.get(), OL, act.get());
        } else {
          const int64_t per = m->rows / c.n_expert;  // FF rows (gate/up) or D rows (down)
          matvec(*m, 0, per, per, ids.get(), U, x.get(), per == D ? FF : 0, y.get(), per, act.get());
        }
      }
    });
    out.push_back(r);
  }
  // Output head matrices (one call each per token).
  for (const auto& [name, m] : {std::pair<std::string, const DevMatrix*>{"output_hc_fn", &dw.output_hc_fn},
                                {"output", &dw.output}}) {
    MatvecRate h;
    h.name = name;
    h.type = ggml_type_name(m->type);
    h.calls = 1;
    h.bytes = m->row_bytes * static_cast<uint64_t>(m->rows);
    h.seconds = time_median(reps, [&] { matvec(*m, 0, m->rows, 0, nullptr, 1, x.get(), 0, y.get(), 0, act.get()); });
    out.push_back(h);
  }
  return out;
}

}  // namespace ds4::cuda
