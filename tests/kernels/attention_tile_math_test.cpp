// The CPU attention tile loops (kernels/cpu/attention_tile_math.h), generic, AVX2 and AVX-512
// (those this CPU has), against float64 on fresh random tiles: the polynomial exp, the score
// dot products and the rescaled weighted sum of V rows, one row at a time and in row blocks
// (every block height the AVX2 and AVX-512 forms split into: 1-17 rows; 16, 32 and 48 keys),
// the row maximum (exact, with its starting value) and the key tile's transpose (exact,
// zero-padded).
#include "kernels/cpu/attention_tile_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvattn::cpu {
namespace {

std::vector<const TileMath*> variants() {
  std::vector<const TileMath*> v = {&tile_math_generic()};
  if (tile_math_avx2() != nullptr) v.push_back(tile_math_avx2());
  if (tile_math_avx512() != nullptr) v.push_back(tile_math_avx512());
  return v;
}

TEST(TileMath, ExpMatchesFloat64AcrossItsRange) {
  std::mt19937_64 rng(std::random_device{}());
  for (const TileMath* m : variants()) {
    SCOPED_TRACE(m->name);
    // Exact edges plus random points in [-100, 0]; m = 0.5 shifts every argument.
    std::vector<float> x = {0.5f, 0.0f, -1e-30f, -0.3465f, -0.3466f, -87.0f, -87.29f, -87.31f,
                            -88.0f, -100.0f, -std::numeric_limits<float>::infinity()};
    std::uniform_real_distribution<float> d(-100.0f, 0.5f);
    for (int i = 0; i < 5000; ++i) x.push_back(d(rng));
    std::vector<float> s = x;
    const float sum = m->softmax(s.data(), static_cast<int64_t>(s.size()), 0.5f);
    double want_sum = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      // The argument as the loop forms it, in float32: only exp's own error is judged.
      const float arg = x[i] - 0.5f;
      const double want = std::exp(static_cast<double>(arg));
      want_sum += want;
      if (arg >= -87.0f) {
        ASSERT_NEAR(s[i], want, 3e-7 * want) << "x = " << x[i];
      } else {
        ASSERT_LE(s[i], 2e-38f) << "x = " << x[i];  // negligible next to any softmax sum
        ASSERT_GE(s[i], 0.0f);
      }
    }
    // A float32 sum of ~5000 positive terms: worst case about (n / lanes) * 2^-24 relative.
    EXPECT_NEAR(sum, want_sum, 1e-4 * want_sum);
    // NaN stays NaN, in a vector's lanes and in the tail alike.
    std::vector<float> bad(11, -1.0f);
    bad[3] = bad[10] = std::nanf("");
    m->softmax(bad.data(), 11, 0.0f);
    EXPECT_TRUE(std::isnan(bad[3]) && std::isnan(bad[10]));
    EXPECT_FLOAT_EQ(bad[0], std::exp(-1.0f));
  }
}

TEST(TileMath, ScoresAndWeightedSumMatchFloat64) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const TileMath* m : variants()) {
    SCOPED_TRACE(m->name);
    for (int64_t d : {1, 8, 15, 16, 24, 64, 80, 96, 128, 131, 256}) {
      for (int64_t n : {1, 2, 7, 9, 15, 64}) {
        std::vector<float> q(d), k(n * d), v(n * d), acc(d), p(n);
        for (auto* buf : {&q, &k, &v, &acc}) for (auto& e : *buf) e = nd(rng);
        std::vector<const float*> k_rows(n), v_rows(n);
        // Rows in reverse order: the loops must follow the pointers, not assume contiguity.
        for (int64_t j = 0; j < n; ++j) {
          k_rows[j] = k.data() + (n - 1 - j) * d;
          v_rows[j] = v.data() + (n - 1 - j) * d;
        }
        std::vector<float> s(n, std::nanf(""));
        m->scores(q.data(), k_rows.data(), n, d, s.data());
        for (int64_t j = 0; j < n; ++j) {
          double want = 0.0, mag = 0.0;
          for (int64_t x = 0; x < d; ++x) {
            want += static_cast<double>(q[x]) * k_rows[j][x];
            mag += std::abs(static_cast<double>(q[x]) * k_rows[j][x]);
          }
          ASSERT_NEAR(s[j], want, 1e-6 * mag + 1e-30) << "d " << d << " n " << n << " j " << j;
        }
        for (auto& e : p) e = std::abs(nd(rng));
        const float corr = 0.37f;
        std::vector<double> want(d);
        for (int64_t x = 0; x < d; ++x) {
          want[x] = static_cast<double>(acc[x]) * corr;
          for (int64_t j = 0; j < n; ++j) want[x] += static_cast<double>(p[j]) * v_rows[j][x];
        }
        m->axpy(acc.data(), corr, p.data(), v_rows.data(), n, d);
        for (int64_t x = 0; x < d; ++x) {
          ASSERT_NEAR(acc[x], want[x], 1e-5 * (1.0 + std::abs(want[x]))) << "d " << d << " n " << n;
        }
      }
    }
  }
}

TEST(TileMath, RowBlocksMatchFloat64) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int64_t kts = 64;  // the backend's key tile: K^T rows and score rows of 64 floats
  for (const TileMath* m : variants()) {
    SCOPED_TRACE(m->name);
    for (int64_t d : {8, 16, 40, 64, 80, 128, 256}) {
      for (int64_t rows : {1, 2, 5, 6, 7, 8, 9, 12, 13, 16, 17}) {
        for (int64_t n : {1, 16, 29, 40, 64}) {
          const int64_t nk = (n + 15) / 16 * 16;
          std::vector<float> q(rows * d), kt(d * kts), v(n * d), acc(rows * d), corr(rows);
          std::vector<float> p(rows * kts);
          for (auto* buf : {&q, &kt, &v, &acc, &corr, &p}) for (auto& e : *buf) e = nd(rng);
          std::vector<float> s(rows * kts, std::nanf(""));
          m->scores_rows(q.data(), rows, d, kt.data(), kts, nk, s.data(), kts);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < nk; ++j) {
              double want = 0.0, mag = 0.0;
              for (int64_t x = 0; x < d; ++x) {
                const double t = static_cast<double>(q[r * d + x]) * kt[x * kts + j];
                want += t;
                mag += std::abs(t);
              }
              ASSERT_NEAR(s[r * kts + j], want, 1e-6 * mag + 1e-30)
                  << "d " << d << " rows " << rows << " nk " << nk << " r " << r << " j " << j;
            }
            for (int64_t j = nk; j < kts; ++j) {
              ASSERT_TRUE(std::isnan(s[r * kts + j])) << "wrote past nk: r " << r << " j " << j;
            }
          }
          std::vector<const float*> v_rows(n);
          for (int64_t j = 0; j < n; ++j) v_rows[j] = v.data() + (n - 1 - j) * d;  // any order
          std::vector<double> want(rows * d);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t x = 0; x < d; ++x) {
              want[r * d + x] = static_cast<double>(acc[r * d + x]) * corr[r];
              for (int64_t j = 0; j < n; ++j) {
                want[r * d + x] += static_cast<double>(p[r * kts + j]) * v_rows[j][x];
              }
            }
          }
          m->axpy_rows(acc.data(), rows, d, corr.data(), p.data(), kts, v_rows.data(), n);
          for (int64_t k = 0; k < rows * d; ++k) {
            ASSERT_NEAR(acc[k], want[k], 1e-5 * (1.0 + std::abs(want[k])))
                << "d " << d << " rows " << rows << " n " << n << " at " << k;
          }
        }
      }
    }
  }
}

TEST(TileMath, MaxIsExactFromItsStart) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (const TileMath* m : variants()) {
    SCOPED_TRACE(m->name);
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 128}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> s(n);
        for (auto& e : s) e = nd(rng);
        // The maximum anywhere (a vector body, a lane of the second accumulator, the tail),
        // a start above every score, or -inf (a row's first tile).
        if (n > 0 && trial % 3 == 0) s[rng() % n] = 100.0f + static_cast<float>(trial);
        const float start = trial % 4 == 1 ? 50.0f : trial % 4 == 2 ? nd(rng) : -inf;
        float want = start;
        for (float e : s) want = std::max(want, e);
        ASSERT_EQ(m->max(s.data(), n, start), want) << "n " << n << " trial " << trial;
      }
    }
  }
}

TEST(TileMath, TransposeIsExactAndZeroPads) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int64_t kts = 64;
  for (const TileMath* m : variants()) {
    SCOPED_TRACE(m->name);
    for (int64_t d : {1, 8, 40, 64, 80, 128, 256}) {
      for (int64_t n : {1, 7, 8, 9, 29, 64}) {
        const int64_t nk = (n + 15) / 16 * 16;
        std::vector<float> k(n * d);
        for (auto& e : k) e = nd(rng);
        std::vector<const float*> rows(n);
        for (int64_t j = 0; j < n; ++j) rows[j] = k.data() + (n - 1 - j) * d;  // any order
        std::vector<float> kt(d * kts, std::nanf(""));
        m->transpose(rows.data(), n, d, kt.data(), kts, nk);
        for (int64_t x = 0; x < d; ++x) {
          for (int64_t j = 0; j < kts; ++j) {
            const float got = kt[x * kts + j];
            if (j < n) {
              ASSERT_EQ(got, rows[j][x]) << "d " << d << " n " << n << " x " << x << " j " << j;
            } else if (j < nk) {
              ASSERT_EQ(got, 0.0f) << "padding: d " << d << " n " << n << " x " << x << " j " << j;
            } else {
              ASSERT_TRUE(std::isnan(got)) << "wrote past nk: x " << x << " j " << j;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvattn::cpu
