#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/forward.h"
#include "parallel/thread_pool.h"

namespace ds4::cpu {
namespace {

class CpuSession final : public BackendSession {
 public:
  CpuSession(const model::Config& c, const model::Weights& w, int threads, int64_t ctx)
      : kv_(c, ctx), forward_(c, w, threads) {}

  void eval(std::span<const int32_t> tokens, int64_t pos0, std::span<float> last_logits,
            std::span<float> all_logits) override {
    forward_.eval(tokens, pos0, kv_, last_logits, all_logits);
  }
  void reset() override { kv_.reset(); }
  void export_state(model::KvState& out) const override { out = kv_; }
  void import_state(const model::KvState& in) override { kv_ = in; }
  int64_t ctx() const override { return kv_.ctx(); }

 private:
  model::KvState kv_;
  Forward forward_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const model::Config& c, const model::Weights& w, int threads)
      : c_(c), w_(w), threads_(threads > 0 ? threads : parallel::available_cores()) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<BackendSession> new_session(int64_t ctx) override {
    return std::make_unique<CpuSession>(c_, w_, threads_, ctx);
  }

 private:
  const model::Config& c_;
  const model::Weights& w_;
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const model::Config& config,
                                          const model::Weights& weights, int threads) {
  return std::make_unique<CpuBackend>(config, weights, threads);
}

}  // namespace ds4::cpu
