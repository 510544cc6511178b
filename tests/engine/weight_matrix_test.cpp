// WeightMatrix (the CPU model's GEMMs) against a float64 reference: every storage type, the
// streaming path (1-4 rows) and the panel + sgemm path (narrow panels up to 128 rows, wide
// panels over blocks of rows beyond), beta 0 and 1, strided rows and odd sizes (tails that are
// not multiples of 8 or 16, a last panel and a last row block shorter than the others).
#include "engine/model/weight_matrix.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "support/test_util.h"

namespace kvattn::cpu_model {
namespace {

struct Shape {
  int64_t rows, out, in;
};

class WeightMatrixTest : public ::testing::TestWithParam<WeightFormat> {};

// How far a stored weight may be from its float32 source (|w| <= 1 here).
double storage_error(WeightFormat f, double w) {
  switch (f) {
    case WeightFormat::kF32: return 0.0;
    case WeightFormat::kF16: return 1e-3 * std::abs(w) + 1e-7;
    case WeightFormat::kBF16: return 4e-3 * std::abs(w) + 1e-7;
    case WeightFormat::kQ8: return 0.5 / 127 + 1e-7;  // half a step of the block's scale
  }
  return 0.0;
}

TEST_P(WeightMatrixTest, MatchesFloat64Reference) {
  const WeightFormat storage = GetParam();
  // Rounding of the stored weights is part of the format; compare with the rounded weights.
  const double tol = 1e-5;
  for (const Shape s : {Shape{1, 40, 64}, Shape{1, 37, 29}, Shape{2, 100, 576}, Shape{3, 17, 8},
                        Shape{4, 64, 33}, Shape{5, 70, 64}, Shape{33, 129, 96}, Shape{9, 8, 3},
                        Shape{4, 33, 1536}, Shape{7, 20, 100}, Shape{300, 1100, 40}}) {
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
      const bool q8_fallback = storage == WeightFormat::kQ8 && s.in % WeightMatrix::kQ8Block != 0;
      ASSERT_EQ(m.format(), q8_fallback ? WeightFormat::kF16 : storage);
      std::vector<float> wr(s.in);
      double max_err = 0, max_ref = 0;
      m.apply(x.data(), ldx, s.rows, y.data(), ldy, beta);
      for (int64_t n = 0; n < s.out; ++n) {
        m.row(n, wr.data());
        for (int64_t k = 0; k < s.in; ++k) {
          const double orig = w.ptr<float>()[n * s.in + k];
          ASSERT_LE(std::abs(wr[k] - orig), storage_error(m.format(), orig)) << "w[" << n << ", " << k << "]";
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

// The same floats whatever the OpenMP team (the CPU model's tuner changes it from step to step
// with the machine's load): both paths, bit for bit, teams of 1, 2 and 3. Session 26: the panel
// path once sized its sgemm panels by the team, and OpenBLAS rounds some elements differently
// for another panel width, so seeded server requests diverged under load.
TEST_P(WeightMatrixTest, SameFloatsForEveryTeamSize) {
  const WeightFormat storage = GetParam();
  for (const Shape s : {Shape{2, 576, 64}, Shape{20, 576, 576}, Shape{33, 1000, 96},
                        Shape{300, 1100, 40}}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " out " << s.out << " in " << s.in
                                      << " seed " << seed);
    std::mt19937_64 rng(seed);
    Tensor w = Tensor::empty({s.out, s.in}, DType::kF32);
    test::fill_uniform(w, rng);
    std::vector<float> x(s.rows * s.in);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng);
    const WeightMatrix m(w, storage);
    std::vector<std::vector<float>> outs;
    const int before = omp_get_max_threads();
    for (int team : {1, 2, 3}) {
      omp_set_num_threads(team);
      std::vector<float> y(s.rows * s.out, NAN);
      m.apply(x.data(), s.in, s.rows, y.data(), s.out, 0.0f);
      outs.push_back(std::move(y));
    }
    omp_set_num_threads(before);
    for (size_t t = 1; t < outs.size(); ++t) {
      for (size_t i = 0; i < outs[0].size(); ++i) {
        ASSERT_EQ(std::memcmp(&outs[t][i], &outs[0][i], 4), 0)
            << "team " << t + 1 << " element " << i << ": " << outs[t][i] << " vs " << outs[0][i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, WeightMatrixTest,
                         ::testing::Values(WeightFormat::kF32, WeightFormat::kF16,
                                           WeightFormat::kBF16, WeightFormat::kQ8),
                         [](const auto& info) { return std::string(weight_format_name(info.param)); });

TEST(WeightMatrix, RejectsNonMatrices) {
  EXPECT_THROW(WeightMatrix(Tensor::zeros({4}, DType::kF32), WeightFormat::kF32), Error);
  EXPECT_THROW(WeightMatrix(Tensor::zeros({2, 2}, DType::kF16), WeightFormat::kF32), Error);
}

TEST(WeightMatrix, Q8KeepsZeroBlocksExact) {
  Tensor w = Tensor::zeros({2, 64}, DType::kF32);
  w.ptr<float>()[70] = 0.5f;
  WeightMatrix m(w, WeightFormat::kQ8);
  std::vector<float> row(64);
  m.row(0, row.data());
  for (float v : row) EXPECT_EQ(v, 0.0f);
  m.row(1, row.data());
  EXPECT_FLOAT_EQ(row[6], 0.5f);
}

}  // namespace
}  // namespace kvattn::cpu_model
