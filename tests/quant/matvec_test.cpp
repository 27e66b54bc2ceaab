// matvec: row o of the result is exactly vec_dot(row o, quantized x), for one thread and for
// several, with and without a pre-quantized activation; bad arguments are rejected.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/error.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace ds4::quant {
namespace {

using testing::same_bits;

TEST(Matvec, EveryRowEqualsVecDotForAnyThreadCount) {
  const int64_t cols = 512, rows = 67;  // 67 rows: an uneven split over threads
  for (GgmlType type : testing::weight_types()) {
    const auto wf = testing::gaussian(rows * cols, 7, 0.1f);
    std::vector<uint8_t> w(row_bytes(type, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(type, wf.data() + r * cols, w.data() + r * row_bytes(type, cols), cols);
    }
    const auto x = testing::gaussian(cols, 8);
    const auto act = testing::quantize_act(activation_type(type), x);
    std::vector<float> y1(rows), y2(rows), y3(rows);
    matvec(type, w.data(), rows, cols, x.data(), y1.data(), 1);
    matvec(type, w.data(), rows, cols, x.data(), y2.data(), 2);
    matvec_act(type, w.data(), rows, cols, act.data(), y3.data(), 3);
    for (int64_t r = 0; r < rows; ++r) {
      const float expected = vec_dot(type, w.data() + r * row_bytes(type, cols), act.data(), cols);
      EXPECT_TRUE(same_bits(y1[r], expected)) << ggml_type_name(type) << " row " << r;
      EXPECT_TRUE(same_bits(y2[r], expected)) << ggml_type_name(type) << " row " << r;
      EXPECT_TRUE(same_bits(y3[r], expected)) << ggml_type_name(type) << " row " << r;
    }
  }
}

TEST(Matvec, ExpertMajorTensorIsConsecutiveRows) {
  // A [cols, rows, experts] tensor: expert e's matrix starts at row e * rows.
  const int64_t cols = 256, rows = 4, experts = 3;
  const auto wf = testing::gaussian(cols * rows * experts, 12, 0.1f);
  const auto w = testing::quantize(GgmlType::IQ2_XXS, wf);
  const auto x = testing::gaussian(cols, 13);
  std::vector<float> all(rows * experts), one(rows);
  matvec(GgmlType::IQ2_XXS, w.data(), rows * experts, cols, x.data(), all.data());
  const size_t expert_bytes = row_bytes(GgmlType::IQ2_XXS, cols) * rows;
  matvec(GgmlType::IQ2_XXS, w.data() + 2 * expert_bytes, rows, cols, x.data(), one.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(same_bits(one[r], all[2 * rows + r]));
}

TEST(Matvec, RejectsBadArguments) {
  std::vector<float> x(256, 1.0f), y(4);
  std::vector<uint8_t> w(4096);
  EXPECT_THROW(matvec(GgmlType::Q8_K, w.data(), 1, 256, x.data(), y.data()), Error);
  EXPECT_THROW(matvec(GgmlType::Q4_0, w.data(), 1, 256, x.data(), y.data()), Error);
  EXPECT_THROW(matvec(GgmlType::Q8_0, w.data(), 1, 100, x.data(), y.data()), Error);
  EXPECT_THROW(matvec(GgmlType::Q8_0, w.data(), -1, 256, x.data(), y.data()), Error);
  EXPECT_THROW(matvec(GgmlType::Q8_0, w.data(), 1, 256, x.data(), y.data(), 0), Error);
  EXPECT_THROW(matvec_act(GgmlType::IQ2_XXS, w.data(), 1, 100, x.data(), y.data()), Error);
}

}  // namespace
}  // namespace ds4::quant
