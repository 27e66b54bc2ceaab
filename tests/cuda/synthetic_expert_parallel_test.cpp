// Expert-parallel synthetic models (ds4-bench --synthetic NAME --gpu-devices, issue #8): a rank's
// generated expert rows must be byte-identical to those rows of the single-device synthetic
// model (same tensor seeds, same block indices), every non-routed tensor identical, and the
// expert-parallel synthetic backend (ranks sharing device 0) must give the single-device
// synthetic backend's logits bit for bit. Tiny shapes (Config::tiny: 16 experts). Skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/expert_parallel.h"
#include "backend/cuda/nccl.h"
#include "common/error.h"
#include "cuda_test_util.h"

namespace ds4 {
namespace {

bool have_device() { return cuda::device_count() > 0; }

std::vector<uint8_t> download(const cuda::DevMatrix& m, int64_t first_row, int64_t rows) {
  std::vector<uint8_t> out(m.row_bytes * static_cast<size_t>(rows));
  cuda::check(cudaMemcpy(out.data(), m.data + m.row_bytes * static_cast<size_t>(first_row), out.size(),
                         cudaMemcpyDeviceToHost),
              "test download");
  return out;
}

std::vector<float> download(const cuda::DeviceArray<float>& v) {
  std::vector<float> out(v.size());
  v.download(out.data(), out.size());
  return out;
}

class SyntheticShardBytes : public ::testing::TestWithParam<model::Recipe> {};

TEST_P(SyntheticShardBytes, ExpertRowsEqualTheSingleDeviceModel) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  cuda::prepare_device(0);
  const model::Config c = model::Config::tiny(512);
  const uint64_t seed = 11;
  const cuda::DeviceWeights full(c, GetParam(), seed);
  const uint32_t b = 3, e = 7;
  const cuda::DeviceWeights shard(c, GetParam(), seed, b, e);
  uint64_t routed_full = 0, routed_shard = 0;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const cuda::DevLayer& F = full.layers[il];
    const cuda::DevLayer& S = shard.layers[il];
    for (const auto& [name, f, s] : {std::tuple{"gate", &F.ffn_gate_exps, &S.ffn_gate_exps},
                                     std::tuple{"up", &F.ffn_up_exps, &S.ffn_up_exps},
                                     std::tuple{"down", &F.ffn_down_exps, &S.ffn_down_exps}}) {
      ASSERT_TRUE(*s) << name;
      const int64_t per = f->rows / c.n_expert;
      ASSERT_EQ(s->rows, per * (e - b)) << name;
      ASSERT_EQ(s->type, f->type);
      ASSERT_EQ(s->row_bytes, f->row_bytes);
      const auto want = download(*f, per * b, per * (e - b));
      const auto got = download(*s, 0, s->rows);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << "layer " << il << " " << name;
      // The rows just outside the range differ (a shifted block index would pass the check above
      // only by accident): the shard's first expert is not the full tensor's expert b-1.
      const auto before = download(*f, per * (b - 1), per);
      EXPECT_NE(0, std::memcmp(before.data(), got.data(), before.size())) << "layer " << il << " " << name;
      routed_full += f->row_bytes * static_cast<uint64_t>(f->rows);
      routed_shard += s->row_bytes * static_cast<uint64_t>(s->rows);
    }
    // Non-routed tensors are generated whole and identical.
    for (const auto& [f, s] : {std::pair{&F.attn_q_a, &S.attn_q_a}, std::pair{&F.ffn_gate_shexp, &S.ffn_gate_shexp},
                               std::pair{&F.ffn_gate_inp, &S.ffn_gate_inp}}) {
      EXPECT_EQ(download(*f, 0, f->rows), download(*s, 0, s->rows)) << "layer " << il;
    }
    EXPECT_EQ(download(F.attn_norm), download(S.attn_norm));
  }
  EXPECT_EQ(download(full.token_embd, 0, full.token_embd.rows), download(shard.token_embd, 0, shard.token_embd.rows));
  EXPECT_EQ(download(full.output, 0, full.output.rows), download(shard.output, 0, shard.output.rows));
  EXPECT_EQ(routed_shard * c.n_expert, routed_full * (e - b));
  EXPECT_EQ(full.bytes - shard.bytes, routed_full - routed_shard);
}

INSTANTIATE_TEST_SUITE_P(Recipes, SyntheticShardBytes,
                         ::testing::Values(model::Recipe::q2, model::Recipe::q4, model::Recipe::f32),
                         [](const auto& info) { return std::string(model::recipe_name(info.param)); });

/// Logits of every position of `prompt` in chunks of 23, then 6 greedy decode steps.
std::vector<float> logits_of(Backend& backend, uint32_t n_vocab, std::span<const int32_t> prompt) {
  auto s = backend.new_session(128);
  std::vector<float> out(prompt.size() * n_vocab), last(n_vocab);
  for (size_t at = 0; at < prompt.size(); at += 23) {
    const size_t n = std::min<size_t>(23, prompt.size() - at);
    s->eval(prompt.subspan(at, n), static_cast<int64_t>(at), last,
            std::span<float>(out).subspan(at * n_vocab, n * n_vocab));
  }
  for (int i = 0; i < 6; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    s->eval({&t, 1}, static_cast<int64_t>(prompt.size()) + i, last, {});
    out.insert(out.end(), last.begin(), last.end());
  }
  return out;
}

TEST(SyntheticExpertParallel, RanksSharingDeviceZeroEqualSingleDeviceLogits) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (model::Recipe recipe : {model::Recipe::q2, model::Recipe::q4}) {
    const synth::SyntheticSpec spec{"tiny", model::Config::tiny(512), recipe};
    const auto prompt = test::prompt_tokens(70, 512, 99);
    auto single = cuda::make_synthetic_backend(spec, {.device = 0, .seed = 5, .ctx = 128});
    const auto want = logits_of(*single, 512, prompt);
    for (const auto& ranges : std::vector<std::vector<std::pair<uint32_t, uint32_t>>>{
             {{0, 8}, {8, 16}}, {{0, 5}, {5, 6}, {6, 16}}}) {
      auto ep = cuda::make_synthetic_expert_parallel_backend(spec, 5, std::vector<int>(ranges.size(), 0), ranges);
      const auto got = logits_of(*ep, 512, prompt);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(test::rel_l2(got, want), 0.0) << model::recipe_name(recipe) << ", " << ranges.size() << " ranks";
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    }
    // Another seed is another model (the seed reaches every rank).
    auto other = cuda::make_synthetic_expert_parallel_backend(spec, 6, {0, 0}, {{0, 8}, {8, 16}});
    EXPECT_GT(test::rel_l2(logits_of(*other, 512, prompt), want), 1e-3);
  }
}

// Two GPUs (NCCL all-reduce): only on a machine with two devices and libnccl.so.2.
TEST(SyntheticExpertParallel, TwoGpusEqualSingleDeviceLogits) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  try {
    cuda::NcclApi::get();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const synth::SyntheticSpec spec{"tiny", model::Config::tiny(512), model::Recipe::q4};
  const auto prompt = test::prompt_tokens(70, 512, 77);
  auto single = cuda::make_synthetic_backend(spec, {.device = 0, .seed = 9, .ctx = 128});
  const auto want = logits_of(*single, 512, prompt);
  auto ep = cuda::make_synthetic_expert_parallel_backend(spec, 9, {0, 1}, {{0, 7}, {7, 16}});
  const auto got = logits_of(*ep, 512, prompt);
  EXPECT_EQ(test::rel_l2(got, want), 0.0);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

TEST(SyntheticExpertParallel, BadLayoutsAreClearErrors) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const synth::SyntheticSpec spec{"tiny", model::Config::tiny(512), model::Recipe::q2};
  auto error_of = [&](const std::vector<int>& devices, const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
    try {
      cuda::make_synthetic_expert_parallel_backend(spec, 1, devices, ranges);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({0, 0}, {{0, 8}, {8, 15}}).find("expert ranges cover 15 of the model's 16 experts"),
            std::string::npos);
  EXPECT_NE(error_of({0, 0}, {{0, 8}, {9, 16}}).find("contiguous"), std::string::npos);
  EXPECT_NE(error_of({0, 0, 1}, {{0, 4}, {4, 8}, {8, 16}}).find("device 0 is listed twice among other devices"),
            std::string::npos);
  EXPECT_NE(error_of({0}, {}).find("0 expert ranges for 1 devices"), std::string::npos);
  EXPECT_NE(error_of({4096, 4096}, {{0, 8}, {8, 16}}).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace ds4
