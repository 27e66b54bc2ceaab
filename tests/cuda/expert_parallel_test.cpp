// Expert parallelism (issue #8) on the devices this machine has: one NCCL rank, and 2 or 4
// ranks sharing one device (in-device reduction), must give the single-device backend's logits
// bit for bit (each expert row is summed with zeros only, then combined in the single-device
// order); bad rank layouts are clear errors. Skips without a device;
// the NCCL case also skips when libnccl.so.2 cannot be loaded.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/expert_parallel.h"
#include "backend/cuda/nccl.h"
#include "common/error.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/gpu_plan.h"

namespace ds4 {
namespace {

using test::rel_l2;

std::string model_path(const char* recipe) { return test::tiny_model_path(recipe); }

std::vector<int32_t> prompt_tokens(size_t n, uint32_t vocab) { return test::prompt_tokens(n, vocab, 424242); }

/// Logits of every position of `prompt` (n x n_vocab) through `backend`, in chunks of 37.
std::vector<float> all_logits(Backend& backend, const model::Config& c, std::span<const int32_t> prompt) {
  auto s = backend.new_session(512);
  std::vector<float> out(prompt.size() * c.n_vocab), last(c.n_vocab);
  for (size_t at = 0; at < prompt.size(); at += 37) {
    const size_t n = std::min<size_t>(37, prompt.size() - at);
    s->eval(prompt.subspan(at, n), static_cast<int64_t>(at), last,
            std::span<float>(out).subspan(at * c.n_vocab, n * c.n_vocab));
  }
  return out;
}

std::vector<std::pair<uint32_t, uint32_t>> even_ranges(uint32_t n_expert, int ranks) {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (int k = 0; k < ranks; ++k) r.emplace_back(n_expert * k / ranks, n_expert * (k + 1) / ranks);
  return r;
}

class ExpertParallel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const auto path = model_path(GetParam());
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing";
    engine_ = Engine::open({.model_path = path, .backend = "cuda", .threads = 1});
    prompt_ = prompt_tokens(300, engine_->config().n_vocab);
    single_ = all_logits(engine_->backend(), engine_->config(), prompt_);
  }
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> prompt_;
  std::vector<float> single_;
};

TEST_P(ExpertParallel, OneNcclRankEqualsSingleDevice) {
  try {
    cuda::NcclApi::get();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const model::Config& c = engine_->config();
  auto ep = cuda::make_expert_parallel_backend(c, engine_->weights(), {0}, even_ranges(c.n_expert, 1));
  const auto got = all_logits(*ep, c, prompt_);
  EXPECT_EQ(rel_l2(got, single_), 0.0);
}

TEST_P(ExpertParallel, TwoNcclRanksOnTwoDevicesEqualSingleDevice) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  try {
    cuda::NcclApi::get();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const model::Config& c = engine_->config();
  auto ep = cuda::make_expert_parallel_backend(c, engine_->weights(), {0, 1}, even_ranges(c.n_expert, 2));
  const auto got = all_logits(*ep, c, prompt_);
  std::printf("%s, 2 NCCL ranks on 2 devices: rel L2 %.3g\n", GetParam(), rel_l2(got, single_));
  EXPECT_EQ(rel_l2(got, single_), 0.0);
}

TEST_P(ExpertParallel, RanksSharingOneDeviceAgree) {
  const model::Config& c = engine_->config();
  for (int ranks : {2, 4}) {
    auto ep = cuda::make_expert_parallel_backend(c, engine_->weights(), std::vector<int>(ranks, 0),
                                                 even_ranges(c.n_expert, ranks));
    const auto got = all_logits(*ep, c, prompt_);
    double worst = 0;
    size_t argmax_same = 0;
    for (size_t p = 0; p < prompt_.size(); ++p) {
      const std::span<const float> a(&got[p * c.n_vocab], c.n_vocab), b(&single_[p * c.n_vocab], c.n_vocab);
      worst = std::max(worst, rel_l2(a, b));
      argmax_same += std::max_element(a.begin(), a.end()) - a.begin() ==
                     std::max_element(b.begin(), b.end()) - b.begin();
    }
    std::printf("%s, %d ranks on one device: worst rel L2 %.3g, argmax %zu/%zu\n", GetParam(), ranks,
                worst, argmax_same, prompt_.size());
    EXPECT_EQ(worst, 0.0) << ranks << " ranks";
    EXPECT_EQ(argmax_same, prompt_.size()) << ranks << " ranks";
  }
}

TEST_P(ExpertParallel, PlannerRangesRunAndBadLayoutsAreErrors) {
  const model::Config& c = engine_->config();
  // Expert ranges from the planner (expert-parallel mode, two equal budgets).
  const auto type_of = [&](const model::TensorSpec& s) { return engine_->reader().tensor(s.name).type(); };
  const ModelFootprint fp = model_footprint(c, type_of, 512);
  const GpuPlan plan = plan_gpus(fp, {0, 1}, {fp.total() * 3, fp.total() * 3}, GpuPlanMode::expert_parallel, 0);
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const DevicePlacement& d : plan.devices) ranges.emplace_back(d.expert_begin, d.expert_end);
  auto ep = cuda::make_expert_parallel_backend(c, engine_->weights(), {0, 0}, ranges);
  EXPECT_EQ(rel_l2(all_logits(*ep, c, prompt_), single_), 0.0);

  auto error_of = [&](std::vector<int> devs, std::vector<std::pair<uint32_t, uint32_t>> r) {
    try {
      cuda::make_expert_parallel_backend(c, engine_->weights(), devs, r);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(error_of({0}, {{0, c.n_expert - 1}}), HasSubstr("cover"));
  EXPECT_THAT(error_of({0, 0}, {{0, 4}, {5, c.n_expert}}), HasSubstr("contiguous"));
  EXPECT_THAT(error_of({0, 0}, {{0, c.n_expert}}), HasSubstr("1 expert ranges for 2 devices"));
  EXPECT_THAT(error_of({}, {}), HasSubstr("at least one device"));
  const int n = cuda::device_count();
  EXPECT_THAT(error_of({0, n}, even_ranges(c.n_expert, 2)), HasSubstr("does not exist"));
  if (n == 1) {
    EXPECT_THAT(error_of({0, 0, n}, even_ranges(c.n_expert, 3)), HasSubstr("listed twice"));
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ExpertParallel, ::testing::Values("f32", "q2"));

}  // namespace
}  // namespace ds4
