#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/device_weights.h"
#include "common/error.h"
#include "quant/iq2xxs_tables.h"
#include "quant/mxfp4_tables.h"

namespace ds4::cuda {
namespace {

class CudaSession final : public BackendSession {
 public:
  CudaSession(const model::Config& c, const model::Weights& w, const DeviceWeights& dw, int device,
              int64_t ctx)
      : device_(device), forward_((select(device), c), w, dw, ctx) {}

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
  CudaBackend(const model::Config& c, const model::Weights& w, int device)
      : c_(c), w_(w), device_(device), dw_((CudaSession::select(device), c), w) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<BackendSession> new_session(int64_t ctx) override {
    return std::make_unique<CudaSession>(c_, w_, dw_, device_, ctx);
  }

 private:
  const model::Config& c_;
  const model::Weights& w_;
  int device_;
  DeviceWeights dw_;
};

}  // namespace

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
  const int n = device_count();
  if (n == 0) fail("--cuda: no CUDA device is available (no GPU or no working NVIDIA driver)");
  if (options.device < 0 || options.device >= n)
    fail("--cuda: device {} does not exist ({} device(s) present)", options.device, n);
  CudaSession::select(options.device);
  if (!upload_quant_tables(quant::kIq2xxs.grid, quant::kIq2xxs.signs, quant::kMxfp4.doubled,
                           quant::kMxfp4.half_scale))
    fail("CUDA backend: cannot upload the quantization tables to the device");
  return std::make_unique<CudaBackend>(config, weights, options.device);
}

}  // namespace ds4::cuda
