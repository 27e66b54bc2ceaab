// cpu::matmul: every (row, token) value is bit-identical to quant::vec_dot of that weight row with
// the token's quantized activation, for any token count, row offset, strides and thread count;
// F32 weights also match a float64 dot; outputs outside the asked rows stay untouched; the
// thread choice of matmul_threads follows its rule.
#include "backend/cpu/linear.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "quant/quant.h"
#include "test_util.h"

namespace ds4::cpu {
namespace {

using testing::gaussian;
using testing::same_bits;

struct OwnedMatrix {
  std::vector<uint8_t> bytes;
  model::Matrix m;
};

OwnedMatrix make_matrix(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  OwnedMatrix o;
  const auto wf = gaussian(static_cast<size_t>(rows * cols), seed, 0.1f);
  const size_t rb = quant::row_bytes(type, cols);
  o.bytes.resize(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(type, wf.data() + r * cols, o.bytes.data() + r * rb, cols);
  o.m.type = type;
  o.m.data = o.bytes.data();
  o.m.cols = cols;
  o.m.rows = rows;
  o.m.row_bytes = rb;
  o.m.name = "test";
  return o;
}

TEST(Matmul, EveryValueEqualsVecDotForAnyTokensAndThreads) {
  const int64_t cols = 256, rows = 301, row0 = 5, n_rows = 290;  // uneven 16-row blocks
  const int64_t x_stride = cols + 3, y_stride = n_rows + 7;
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q2_K,
                        GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::MXFP4}) {
    const auto w = make_matrix(type, rows, cols, 11);
    const quant::ActType at = quant::activation_type(type);
    for (int64_t n_tok : {1, 2, 37}) {
      const auto x = gaussian(static_cast<size_t>(n_tok * x_stride), 23);
      for (int threads : {1, 2, 3}) {
        std::vector<float> y(static_cast<size_t>(n_tok * y_stride), -7.0f);
        ActScratch scratch;
        matmul(w.m, row0, n_rows, x.data(), x_stride, n_tok, y.data(), y_stride, scratch, threads);
        for (int64_t t = 0; t < n_tok; ++t) {
          std::vector<uint8_t> act(quant::act_row_bytes(at, cols));
          quant::quantize_activation(at, x.data() + t * x_stride, act.data(), cols);
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want = quant::vec_dot(type, w.m.row(row0 + r), act.data(), cols);
            ASSERT_TRUE(same_bits(y[t * y_stride + r], want))
                << ggml_type_name(type) << " tokens " << n_tok << " threads " << threads << " t " << t
                << " r " << r;
          }
          for (int64_t r = n_rows; r < y_stride; ++r) ASSERT_EQ(y[t * y_stride + r], -7.0f);
        }
      }
    }
  }
}

TEST(Matmul, F32WeightsMatchAFloat64Dot) {
  const int64_t cols = 64, rows = 40, n_tok = 3;
  const auto w = make_matrix(GgmlType::F32, rows, cols, 5);
  const auto x = gaussian(static_cast<size_t>(n_tok * cols), 6);
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  ActScratch scratch;
  matmul(w.m, x.data(), cols, n_tok, y.data(), rows, scratch, 2);
  const auto* wf = reinterpret_cast<const float*>(w.bytes.data());
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += static_cast<double>(wf[r * cols + c]) * x[t * cols + c];
        mag += std::fabs(static_cast<double>(wf[r * cols + c]) * x[t * cols + c]);
      }
      EXPECT_NEAR(y[t * rows + r], ref, 1e-6 * mag + 1e-12) << t << " " << r;
    }
}

TEST(Matmul, ZeroRowsOrTokensWriteNothingAndBadColumnsThrow) {
  const auto w = make_matrix(GgmlType::Q8_0, 16, 64, 3);
  std::vector<float> x(64, 1.0f), y(16, -1.0f);
  ActScratch scratch;
  matmul(w.m, 0, 0, x.data(), 64, 1, y.data(), 16, scratch, 2);
  matmul(w.m, 0, 16, x.data(), 64, 0, y.data(), 16, scratch, 2);
  for (float v : y) EXPECT_EQ(v, -1.0f);
  model::Matrix bad = w.m;
  bad.cols = 48;  // not a multiple of Q8_0's 32-element block
  EXPECT_THROW(matmul(bad, x.data(), 64, 1, y.data(), 16, scratch, 1), Error);
}

TEST(MatmulThreads, OnePer32KiMultiplyAddsAndPerBlock) {
  // (cols, rows, tokens, threads)
  EXPECT_EQ(matmul_threads(256, 64, 1, 8), 1);         // 16 Ki MACs
  EXPECT_EQ(matmul_threads(256, 256, 1, 8), 2);        // 64 Ki MACs
  EXPECT_EQ(matmul_threads(256, 64, 8, 8), 4);         // tokens multiply the work: 128 Ki
  EXPECT_EQ(matmul_threads(1 << 20, 20, 1, 8), 2);     // 20 rows = 2 blocks of 16
  EXPECT_EQ(matmul_threads(4096, 4096, 512, 2), 2);
  EXPECT_EQ(matmul_threads(4096, 4096, 1, 0), 1);
  EXPECT_EQ(matmul_threads(4096, 0, 1, 8), 1);
}

}  // namespace
}  // namespace ds4::cpu
