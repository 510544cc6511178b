// The Hopper prefill's FMA-pipe exponential (kernels/cuda/hopper/exp2_fma.h), on the CPU as the
// GPU computes it: its relative error against exp2 in double over the softmax's range, exact 0
// below -125 and for masked (-inf) scores, NaN kept, and the even spread of the column tiles
// that take it.
#include "kernels/cuda/hopper/exp2_fma.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace {

using kvattn::cuda::exp2_fma;
using kvattn::cuda::poly_exp_tile;

TEST(Exp2Fma, RelativeErrorOverTheSoftmaxRange) {
  // Every float step of 2^-12 over [-125, 0.25] (x slightly above 0 comes from rounding in
  // s * scale - max), then random points.
  double worst = 0.0;
  for (int i = -125 * 4096; i <= 1024; ++i) {
    const float x = static_cast<float>(i) / 4096.0f;
    const double want = std::exp2(static_cast<double>(x));
    const double rel = std::fabs(exp2_fma(x) / want - 1.0);
    ASSERT_LT(rel, 8e-5) << "x = " << x;
    worst = std::max(worst, rel);
  }
  std::mt19937 rng(20261207);
  std::uniform_real_distribution<float> dist(-125.0f, 0.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = dist(rng);
    const double rel = std::fabs(exp2_fma(x) / std::exp2(static_cast<double>(x)) - 1.0);
    ASSERT_LT(rel, 8e-5) << "x = " << x;
  }
  // The fit's error is real (not exact by accident) and of the size the header states.
  EXPECT_GT(worst, 1e-5);
}

TEST(Exp2Fma, UnderflowMaskedAndNaN) {
  EXPECT_EQ(exp2_fma(-125.0001f), 0.0f);
  EXPECT_EQ(exp2_fma(-126.0f), 0.0f);
  EXPECT_EQ(exp2_fma(-1e30f), 0.0f);
  EXPECT_EQ(exp2_fma(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_GT(exp2_fma(-125.0f), 0.0f);
  EXPECT_TRUE(std::isnormal(exp2_fma(-125.0f)));
  EXPECT_TRUE(std::isnan(exp2_fma(std::numeric_limits<float>::quiet_NaN())));
  // The row's own maximum (x = 0) within the fit's error of 1, as ex2.approx is within its own.
  EXPECT_NEAR(exp2_fma(0.0f), 1.0f, 8e-5f);
}

template <int kPoly, int kNT>
int count_poly_tiles() {
  int n = 0;
  int last = -kNT;
  int min_gap = kNT;
  for (int nt = 0; nt < kNT; ++nt) {
    if (poly_exp_tile<kPoly, kNT>(nt)) {
      ++n;
      min_gap = std::min(min_gap, nt - last);
      last = nt;
    }
  }
  // Spread: no two chosen tiles closer than kNT / kPoly rounded down.
  if (kPoly > 0) {
    EXPECT_GE(min_gap, kNT / kPoly) << kPoly << " of " << kNT;
  }
  return n;
}

TEST(Exp2Fma, ColumnTilesSpreadEvenly) {
  EXPECT_EQ((count_poly_tiles<0, 16>()), 0);
  EXPECT_EQ((count_poly_tiles<1, 16>()), 1);
  EXPECT_EQ((count_poly_tiles<2, 16>()), 2);
  EXPECT_EQ((count_poly_tiles<3, 16>()), 3);
  EXPECT_EQ((count_poly_tiles<4, 16>()), 4);
  EXPECT_EQ((count_poly_tiles<5, 16>()), 5);
  EXPECT_EQ((count_poly_tiles<16, 16>()), 16);
  EXPECT_EQ((count_poly_tiles<3, 10>()), 3);
}

}  // namespace
