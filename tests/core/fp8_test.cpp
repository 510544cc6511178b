// e4m3 (OCP e4m3fn) encode/decode, exhaustively: every code decodes to the value the format
// defines (computed independently here from sign/exponent/mantissa in double), every finite
// code round-trips, float -> e4m3 matches a brute-force nearest search with ties to even on a
// dense sweep plus every midpoint, saturation at +-448, Inf, NaN and signed zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kvattn/core/dtype.h"
#include "kvattn/core/fp8.h"

namespace kvattn {
namespace {

// The format's definition, in double.
double reference_value(int code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e = (code >> 3) & 0xf, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * m * std::pow(2.0, -9);
  return sign * (1.0 + m / 8.0) * std::pow(2.0, e - 7);
}

bool is_nan_code(uint8_t c) { return (c & 0x7f) == 0x7f; }

// Nearest finite e4m3 value to x (|x| <= 448 + half an ulp), ties to the even code.
uint8_t brute_force_encode(double x) {
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(static_cast<uint8_t>(c))) continue;
    const double v = reference_value(c);
    if (v == 0 && std::signbit(v) != std::signbit(x)) continue;  // zero keeps x's sign
    const double err = std::fabs(v - x);
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(E4M3, EveryCodeDecodesToItsDefinedValue) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double ref = reference_value(c);
    const float got = e4m3_to_float(static_cast<uint8_t>(c));
    const float table = e4m3_table()[c];
    if (std::isnan(ref)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got) && std::isnan(table)) << "code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), ref) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
    EXPECT_EQ(std::memcmp(&got, &table, 4), 0) << "code " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only: e4m3fn has no infinities
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(E4M3, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(static_cast<uint8_t>(c))) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(E4M3, RoundsToNearestEvenIncludingEveryMidpoint) {
  // Every midpoint between adjacent finite values of one sign goes to the even code, and the
  // floats just either side of it go to their nearest neighbour.
  for (int sign = 0; sign < 2; ++sign) {
    for (int c = 0; c < 0x7e; ++c) {
      const int lo = c | (sign << 7), hi = (c + 1) | (sign << 7);
      const float a = e4m3_to_float(static_cast<uint8_t>(lo));
      const float b = e4m3_to_float(static_cast<uint8_t>(hi));
      const float mid = (a + b) / 2;  // exact in float32
      ASSERT_EQ(static_cast<double>(mid), (reference_value(lo) + reference_value(hi)) / 2);
      EXPECT_EQ(float_to_e4m3(mid), (lo & 1) == 0 ? lo : hi) << "midpoint of codes " << lo;
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, a)), lo) << "below midpoint " << lo;
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, b)), hi) << "above midpoint " << lo;
    }
  }
  // Explicit ties: 1 + 1/16 lies between 1 (0x38, even) and 1.125 (0x39).
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);  // between 0x39 and 0x3a: to the even 0x3a
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal ulps: to even
}

TEST(E4M3, MatchesBruteForceOnRandomFloats) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 9.5f);
  for (int i = 0; i < 50000; ++i) {
    float x = std::exp2(exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    if (std::fabs(x) > 448.0f) x = std::copysign(448.0f, x);
    ASSERT_EQ(float_to_e4m3(x), brute_force_encode(x)) << "x = " << x;
  }
}

TEST(E4M3, SaturatesInfAndKeepsNanAndSignedZero) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(463.99f), 0x7e);  // below the 448/480 midpoint anyway
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);   // would round to 480 (the NaN code): saturates
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::max()), 0x7e);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::signaling_NaN()), 0x7f);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)) && e4m3_to_float(0x80) == 0.0f);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(E4M3, ScaledQuantisation) {
  // stored = e4m3(x / scale), read back as value * scale.
  EXPECT_EQ(quantize_e4m3(3.0f, 2.0f), float_to_e4m3(1.5f));
  EXPECT_EQ(quantize_e4m3(1e4f, 10.0f), 0x7e);  // 1000 saturates to 448
  EXPECT_EQ(e4m3_to_float(quantize_e4m3(-896.0f, 2.0f)) * 2.0f, -896.0f);
}

TEST(E4M3, DTypeFacts) {
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "float8_e4m3");
  static_assert(dtype_of<f8e4m3_t>() == DType::kF8E4M3);
  static_assert(sizeof(f8e4m3_t) == 1);
  EXPECT_EQ(to_float(f8e4m3_t{0x38}), 1.0f);
}

}  // namespace
}  // namespace kvattn
