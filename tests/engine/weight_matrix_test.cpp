// WeightMatrix (the CPU model's GEMMs) against a float64 reference: every storage type, the
// streaming path (1-4 rows) and the panel + sgemm path, beta 0 and 1, strided rows and odd
// sizes (tails that are not multiples of 8 or 16).
#include "engine/model/weight_matrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "support/test_util.h"

namespace kvattn::cpu_model {
namespace {

struct Shape {
  int64_t rows, out, in;
};

class WeightMatrixTest : public ::testing::TestWithParam<DType> {};

TEST_P(WeightMatrixTest, MatchesFloat64Reference) {
  const DType storage = GetParam();
  // Rounding of the stored weights is part of the format; compare with the rounded weights.
  const double tol = 1e-5;
  for (const Shape s : {Shape{1, 40, 64}, Shape{1, 37, 29}, Shape{2, 100, 576}, Shape{3, 17, 8},
                        Shape{4, 64, 33}, Shape{5, 70, 64}, Shape{33, 129, 100}, Shape{9, 8, 3}}) {
    for (float beta : {0.0f, 1.0f}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " out " << s.out << " in " << s.in
                                        << " beta " << beta << " seed " << seed);
      std::mt19937_64 rng(seed);
      Tensor w = Tensor::empty({s.out, s.in}, DType::kF32);
      test::fill_uniform(w, rng);
      const int64_t ldx = s.in + 3, ldy = s.out + 5;
      std::vector<float> x(s.rows * ldx), y(s.rows * ldy);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (auto& v : x) v = u(rng);
      for (auto& v : y) v = u(rng);
      if (beta == 0.0f) {  // must not be read
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t n = 0; n < s.out; ++n) y[r * ldy + n] = NAN;
        }
      }
      const std::vector<float> y0 = y;
      WeightMatrix m(w, storage);
      ASSERT_EQ(m.dtype(), storage);
      std::vector<float> wr(s.in);
      double max_err = 0, max_ref = 0;
      m.apply(x.data(), ldx, s.rows, y.data(), ldy, beta);
      for (int64_t n = 0; n < s.out; ++n) {
        m.row(n, wr.data());
        for (int64_t k = 0; k < s.in; ++k) {
          const double orig = w.ptr<float>()[n * s.in + k];
          ASSERT_LE(std::abs(wr[k] - orig), (storage == DType::kF32 ? 0.0 : 1e-2) * std::abs(orig) + 1e-7);
        }
        for (int64_t r = 0; r < s.rows; ++r) {
          double ref = beta == 0.0f ? 0.0 : beta * static_cast<double>(y0[r * ldy + n]);
          for (int64_t k = 0; k < s.in; ++k) ref += static_cast<double>(wr[k]) * x[r * ldx + k];
          ASSERT_FALSE(std::isnan(y[r * ldy + n])) << "row " << r << " col " << n;
          max_err = std::max(max_err, std::abs(y[r * ldy + n] - ref));
          max_ref = std::max(max_ref, std::abs(ref));
        }
      }
      EXPECT_LT(max_err / max_ref, tol);
      // Padding between rows is untouched.
      for (int64_t r = 0; r < s.rows; ++r) {
        for (int64_t n = s.out; n < ldy; ++n) EXPECT_EQ(y[r * ldy + n], y0[r * ldy + n]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, WeightMatrixTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(WeightMatrix, RejectsOtherStorage) {
  Tensor w = Tensor::zeros({2, 2}, DType::kF32);
  EXPECT_THROW(WeightMatrix(w, DType::kI32), Error);
  EXPECT_THROW(WeightMatrix(Tensor::zeros({4}, DType::kF32), DType::kF32), Error);
}

}  // namespace
}  // namespace kvattn::cpu_model
