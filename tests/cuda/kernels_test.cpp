// Single CUDA kernels against the CPU units they port (src/model, src/quant), on inputs chosen
// to hit their edge cases: the radix-select top-k with ties, NaN and signed zeros; the
// block-parallel indexer QAT; the fused HC norm + projection. Results must be bit-identical.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "common/f16.h"
#include "model/indexer.h"
#include "model/kv_quant.h"
#include "model/norms.h"
#include "model/router.h"
#include "quant/quant.h"

namespace ds4 {
namespace {

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cuda::prepare_device(0);
  }
};

// Top-k of n scores at the position whose ratio-4 row count is n, against the CPU selection.
std::vector<uint32_t> gpu_top_k(const std::vector<float>& scores, int64_t k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  cuda::DeviceArray<float> s(scores.size());
  s.upload(scores.data(), scores.size());
  const int64_t pos = 4 * n - 1;  // (pos + 1) / 4 == n
  cuda::DeviceArray<int64_t> p(1);
  p.upload(&pos, 1);
  cuda::DeviceArray<uint32_t> sel(static_cast<size_t>(n + k));
  cuda::indexer_top_k(s.get(), p.get(), 4, n, k, sel.get());
  cuda::check(cudaDeviceSynchronize(), "top-k");
  std::vector<uint32_t> out(static_cast<size_t>(std::min(n, k)));
  sel.download(out.data(), out.size());
  return out;
}

std::vector<uint32_t> cpu_top_k(const std::vector<float>& scores, size_t k) {
  std::vector<uint32_t> idx(scores.size());
  const size_t m = model::indexer_select_top_k(scores, k, idx);
  idx.resize(m);
  return idx;
}

TEST_F(CudaKernels, TopKMatchesCpuWithTiesNanAndSignedZeros) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Few distinct values: long runs of ties, so the lowest-id rule decides most of the selection.
  const std::vector<float> palette = {0.5f, -0.0f, 0.0f, nan, 1.25f, -inf, inf, -3.0f, 0.5f, 2.0f};
  for (const int64_t n : {5, 600, 5000, 70000}) {
    for (const int64_t k : {1, 7, 512}) {
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = palette[rng() % palette.size()];
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "palette n=" << n << " k=" << k;
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : s) v = nd(rng);
      EXPECT_EQ(gpu_top_k(s, k), cpu_top_k(s, static_cast<size_t>(k))) << "normal n=" << n << " k=" << k;
    }
  }
  // All NaN: the k lowest ids.
  std::vector<float> all_nan(1000, nan);
  EXPECT_EQ(gpu_top_k(all_nan, 512), cpu_top_k(all_nan, 512));
}

TEST_F(CudaKernels, IndexerQatMatchesCpuRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int rows = 64;
  const int64_t dim = 128;
  std::vector<float> x(static_cast<size_t>(rows * dim));
  for (float& v : x) v = nd(rng);
  x[3] = 0.0f;
  for (int64_t i = 0; i < dim; ++i) x[static_cast<size_t>(5 * dim + i)] = 0.0f;  // an all-zero row
  cuda::DeviceArray<float> d(x.size());
  d.upload(x.data(), x.size());
  cuda::indexer_qat(d.get(), rows, dim);
  cuda::check(cudaDeviceSynchronize(), "qat");
  std::vector<float> got(x.size());
  d.download(got.data(), got.size());
  for (int r = 0; r < rows; ++r) model::indexer_qat_row({&x[static_cast<size_t>(r * dim)], static_cast<size_t>(dim)});
  EXPECT_EQ(got, x);
}

TEST_F(CudaKernels, HcNormMatvecEqualsNormThenVecDot) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 24, cols = 16384;
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = 3.0f * nd(rng);
  for (const GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16}) {
    const size_t rb = static_cast<size_t>(cols) * (type == GgmlType::F32 ? 4 : 2);
    std::vector<uint8_t> w(rb * rows);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = 0.05f * nd(rng);
      if (type == GgmlType::F32) reinterpret_cast<float*>(w.data())[i] = v;
      else if (type == GgmlType::F16) reinterpret_cast<uint16_t*>(w.data())[i] = f32_to_f16(v);
      else reinterpret_cast<uint16_t*>(w.data())[i] = f32_to_bf16(v);
    }
    std::vector<float> flat(x.size()), want(static_cast<size_t>(rows));
    model::rms_norm_unweighted(x, flat);
    for (int64_t r = 0; r < rows; ++r) want[static_cast<size_t>(r)] = quant::vec_dot(type, &w[r * rb], flat.data(), cols);
    cuda::DeviceArray<uint8_t> dw(w.size());
    dw.upload(w.data(), w.size());
    cuda::DeviceArray<float> dx(x.size()), dy(static_cast<size_t>(rows));
    dx.upload(x.data(), x.size());
    ASSERT_TRUE(cuda::hc_norm_matvec(static_cast<uint32_t>(type), dw.get(), rb, rows, cols, dx.get(),
                                     model::kRmsEps, dy.get()));
    cuda::check(cudaDeviceSynchronize(), "hc_norm_matvec");
    std::vector<float> got(static_cast<size_t>(rows));
    dy.download(got.data(), got.size());
    EXPECT_EQ(got, want) << "type " << static_cast<int>(type);
  }
  // Types it does not handle are declined, not computed.
  EXPECT_FALSE(cuda::hc_norm_matvec(static_cast<uint32_t>(GgmlType::Q8_0), nullptr, 34, 1, 32, nullptr, 1e-6f, nullptr));
}

// Router selection (spec §3.5) with many exact ties and a NaN logit, with and without bias, against
// router_probs + router_select_top_k + router_weights.
TEST_F(CudaKernels, RouterSelectionMatchesCpuWithTies) {
  std::mt19937 rng(3);
  for (const int n : {16, 256, 384}) {
    for (const bool with_bias : {false, true}) {
      const int k = 6;
      std::vector<float> logits(static_cast<size_t>(n)), bias;
      for (float& v : logits) v = 0.25f * static_cast<float>(rng() % 9) - 1.0f;  // 9 distinct values
      logits[static_cast<size_t>(n / 3)] = std::numeric_limits<float>::quiet_NaN();
      if (with_bias) {
        bias.resize(static_cast<size_t>(n));
        for (float& v : bias) v = 0.125f * static_cast<float>(rng() % 3);
      }
      std::vector<float> p(logits.size());
      model::router_probs(logits, p);
      std::vector<int32_t> want(static_cast<size_t>(k));
      model::router_select_top_k(p, bias, want);
      std::vector<float> want_w(static_cast<size_t>(k));
      model::router_weights(p, want, 1.5f, want_w);
      cuda::DeviceArray<float> dl(logits.size()), db(std::max<size_t>(bias.size(), 1)), dp(logits.size()), dw(k);
      cuda::DeviceArray<int32_t> dsel(k), dord(k), dtok(1);
      cuda::DeviceArray<int64_t> dpos(1);
      dl.upload(logits.data(), logits.size());
      if (with_bias) db.upload(bias.data(), bias.size());
      const int64_t pos = 0;
      dpos.upload(&pos, 1);
      cuda::router(dl.get(), n, with_bias ? db.get() : nullptr, nullptr, dtok.get(), dpos.get(), k, 1.5f, dp.get(),
                   dsel.get(), dw.get(), dord.get());
      cuda::check(cudaDeviceSynchronize(), "router");
      std::vector<int32_t> got(static_cast<size_t>(k)), ord(static_cast<size_t>(k));
      std::vector<float> got_w(static_cast<size_t>(k));
      dsel.download(got.data(), got.size());
      dw.download(got_w.data(), got_w.size());
      dord.download(ord.data(), ord.size());
      EXPECT_EQ(got, want) << "n=" << n << " bias=" << with_bias;
      // Weights: the device's exp/log1p (f64, rounded once) may differ from glibc's by an ulp.
      for (int i = 0; i < k; ++i)
        EXPECT_NEAR(got_w[static_cast<size_t>(i)], want_w[static_cast<size_t>(i)], 4e-7f * std::fabs(want_w[static_cast<size_t>(i)]))
            << "n=" << n << " bias=" << with_bias;
      for (int i = 1; i < k; ++i) EXPECT_LT(got[static_cast<size_t>(ord[i - 1])], got[static_cast<size_t>(ord[i])]);
    }
  }
}

}  // namespace
}  // namespace ds4
