// The public surface of ds4::quant: sizes, type mapping, ISA selection and the errors every
// bad argument produces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

// Runs f and returns the ds4::Error message it throws ("" if it does not throw).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantApi, RowBytes) {
  EXPECT_EQ(row_bytes(GgmlType::F32, 3), 12u);
  EXPECT_EQ(row_bytes(GgmlType::F16, 3), 6u);
  EXPECT_EQ(row_bytes(GgmlType::BF16, 5), 10u);
  EXPECT_EQ(row_bytes(GgmlType::Q8_0, 4096), 128u * 34);
  EXPECT_EQ(row_bytes(GgmlType::Q2_K, 4096), 16u * 84);
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 4096), 16u * 144);
  EXPECT_EQ(row_bytes(GgmlType::IQ2_XXS, 4096), 16u * 66);
  EXPECT_EQ(row_bytes(GgmlType::MXFP4, 4096), 128u * 17);
  EXPECT_EQ(row_bytes(GgmlType::Q8_K, 512), 2u * 292);
  EXPECT_EQ(row_bytes(GgmlType::Q8_0, 0), 0u);
  EXPECT_EQ(act_row_bytes(ActType::F32, 7), 28u);
  EXPECT_EQ(act_row_bytes(ActType::Q8_0, 64), 72u);
  EXPECT_EQ(act_row_bytes(ActType::Q8_K, 256), 292u);
}

TEST(QuantApi, RowBytesErrorsNameTheProblem) {
  EXPECT_NE(error_of([] { row_bytes(GgmlType::Q4_0, 32); }).find("Q4_0"), std::string::npos);
  EXPECT_NE(error_of([] { row_bytes(GgmlType::Q8_0, 100); }).find("block size 32"),
            std::string::npos);
  EXPECT_NE(error_of([] { row_bytes(GgmlType::F32, -1); }).find("negative"), std::string::npos);
  EXPECT_NE(error_of([] { act_row_bytes(ActType::Q8_K, 255); }).find("256"), std::string::npos);
}

TEST(QuantApi, ActivationTypes) {
  EXPECT_EQ(activation_type(GgmlType::F32), ActType::F32);
  EXPECT_EQ(activation_type(GgmlType::F16), ActType::F32);
  EXPECT_EQ(activation_type(GgmlType::BF16), ActType::F32);
  EXPECT_EQ(activation_type(GgmlType::Q8_0), ActType::Q8_0);
  EXPECT_EQ(activation_type(GgmlType::MXFP4), ActType::Q8_0);
  EXPECT_EQ(activation_type(GgmlType::Q2_K), ActType::Q8_K);
  EXPECT_EQ(activation_type(GgmlType::Q4_K), ActType::Q8_K);
  EXPECT_EQ(activation_type(GgmlType::IQ2_XXS), ActType::Q8_K);
  EXPECT_THROW(activation_type(GgmlType::Q8_K), Error);
  EXPECT_THROW(activation_type(GgmlType::Q6_K), Error);
  EXPECT_STREQ(act_type_name(ActType::Q8_K), "Q8_K");
}

TEST(QuantApi, SupportedTypes) {
  for (GgmlType t : testing::weight_types()) {
    EXPECT_TRUE(is_supported(t));
    EXPECT_TRUE(is_weight_type(t));
  }
  EXPECT_TRUE(is_supported(GgmlType::Q8_K));
  EXPECT_FALSE(is_weight_type(GgmlType::Q8_K));
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::IQ2_XS, GgmlType::I32}) {
    EXPECT_FALSE(is_supported(t));
    EXPECT_FALSE(is_weight_type(t));
  }
}

TEST(QuantApi, BadArgumentsThrow) {
  std::vector<float> x(512, 1.0f), y(512);
  std::vector<uint8_t> q(4096);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, q.data(), y.data(), 32), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q2_K, q.data(), y.data(), 100), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q6_K, x.data(), q.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::MXFP4, x.data(), q.data(), 31), Error);
  EXPECT_THROW(vec_dot(GgmlType::Q8_K, q.data(), q.data(), 256), Error);
  EXPECT_THROW(vec_dot(GgmlType::Q4_K, q.data(), q.data(), 128), Error);
  EXPECT_THROW(quantize_activation(ActType::Q8_0, x.data(), q.data(), 48), Error);
}

TEST(QuantApi, NonFiniteInputsAreRejectedByQuantizedFormats) {
  std::vector<float> x(256, 1.0f);
  x[77] = NAN;
  std::vector<uint8_t> q(4096);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS,
                     GgmlType::MXFP4}) {
    const std::string msg = error_of([&] { quantize_row(t, x.data(), q.data(), 256); });
    EXPECT_NE(msg.find("element 77"), std::string::npos) << msg;
  }
  x[77] = INFINITY;
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 256), Error);
  // Plain float formats convert non-finite values (IEEE semantics).
  EXPECT_NO_THROW(quantize_row(GgmlType::F16, x.data(), q.data(), 256));
  EXPECT_EQ(reinterpret_cast<uint16_t*>(q.data())[77], 0x7c00);
}

TEST(QuantApi, IsaNamesAndSelection) {
  Isa parsed;
  EXPECT_TRUE(parse_isa("avx2", &parsed));
  EXPECT_EQ(parsed, Isa::Avx2);
  EXPECT_TRUE(parse_isa("scalar", &parsed));
  EXPECT_EQ(parsed, Isa::Scalar);
  EXPECT_FALSE(parse_isa("avx9", &parsed));
  EXPECT_FALSE(parse_isa(nullptr, &parsed));
  EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  const Isa saved = active_isa();
  for (Isa isa : testing::runnable_isas()) {
    set_isa(isa);
    EXPECT_EQ(active_isa(), isa);
  }
  set_isa(saved);
}

// DS4_ISA is read on first use, so these run in a fresh process (threadsafe death tests
// re-execute the binary).
TEST(QuantApiDeathTest, EnvironmentSelectsOrRejectsTheIsa) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto probe = [] {
    try {
      std::fprintf(stderr, "active=%s\n", isa_name(active_isa()));
      std::_Exit(0);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::_Exit(3);
    }
  };
  setenv("DS4_ISA", "bogus", 1);
  EXPECT_EXIT(probe(), ::testing::ExitedWithCode(3), "DS4_ISA='bogus' is not a known");
  setenv("DS4_ISA", "scalar", 1);
  EXPECT_EXIT(probe(), ::testing::ExitedWithCode(0), "active=scalar");
  unsetenv("DS4_ISA");
}

}  // namespace
}  // namespace ds4::quant
