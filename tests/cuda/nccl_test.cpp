// NCCL group on the devices of this machine: a 1-rank all-reduce must leave the data bit for
// bit unchanged, a 2-rank one (when two devices exist) must give the exact sum; a missing
// library is a clear error. Skips without a CUDA device or without libnccl.so.2.
#include "backend/cuda/nccl.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <gmock/gmock.h>

#include <random>

#include "backend/cuda/device_memory.h"
#include "common/error.h"

namespace ds4::cuda {
namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool nccl_available(std::string* why) {
  try {
    NcclApi::get();
    return true;
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

TEST(Nccl, MissingLibraryIsAClearError) {
  try {
    NcclApi::load("/nonexistent/libnccl.so.2");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot load NCCL (/nonexistent/libnccl.so.2)"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DS4_NCCL_LIBRARY"));
  }
}

// Loading NCCL turns NVLink multicast off unless the environment already chose (docs/multi-gpu.md).
TEST(Nccl, LoadDefaultsNvlsOffWithoutOverridingTheUser) {
  unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_THROW(NcclApi::load("/nonexistent/libnccl.so.2"), Error);
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  EXPECT_THROW(NcclApi::load("/nonexistent/libnccl.so.2"), Error);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "1");
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // the lent machines' requirement, for the tests after this one
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Nccl, AllReduceOverEveryLocalDevice) {
  const int n_dev = device_count();
  if (n_dev == 0) GTEST_SKIP() << "no CUDA device";
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << why;
  for (int ranks = 1; ranks <= std::min(n_dev, 2); ++ranks) {
    std::vector<int> devs;
    for (int r = 0; r < ranks; ++r) devs.push_back(r);
    NcclGroup group(devs);
    const size_t n = 1 << 20;
    std::vector<std::vector<float>> host;
    std::vector<DeviceArray<float>> bufs;
    std::vector<float*> ptrs;
    std::vector<cudaStream_t> streams(ranks);
    for (int r = 0; r < ranks; ++r) {
      check(cudaSetDevice(r), "cudaSetDevice");
      check(cudaStreamCreate(&streams[r]), "cudaStreamCreate");
      host.push_back(random_values(n, 7 + r));
      bufs.emplace_back(n);
      bufs.back().upload(host.back().data(), n);
      ptrs.push_back(bufs.back().get());
    }
    group.all_reduce_sum(ptrs, n, streams);
    for (int r = 0; r < ranks; ++r) {
      check(cudaSetDevice(r), "cudaSetDevice");
      check(cudaStreamSynchronize(streams[r]), "sync");
      std::vector<float> out(n);
      bufs[r].download(out.data(), n);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        float want = host[0][i];
        for (int q = 1; q < ranks; ++q) want += host[q][i];  // two terms: order-free
        bad += out[i] != want;
      }
      EXPECT_EQ(bad, 0u) << ranks << " ranks, rank " << r;
      cudaStreamDestroy(streams[r]);
    }
    check(cudaSetDevice(0), "cudaSetDevice");
  }
}

TEST(Nccl, TwoRanksOnOneDeviceAreRefusedOrCorrect) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << why;
  // NCCL documents one rank per device per communicator; ours must surface its refusal as a
  // ds4::Error rather than hang or crash.
  try {
    NcclGroup group({0, 0});
    SUCCEED() << "this NCCL accepted two ranks on one device";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("NCCL error in ncclCommInitAll"));
  }
}

}  // namespace
}  // namespace ds4::cuda
