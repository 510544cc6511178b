// DType facts and the host bf16/fp16 conversions: exhaustive round trips of every 16-bit
// pattern, and float -> 16-bit rounding (round to nearest, ties to even) checked against a
// brute-force nearest-value search over all representable values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "kvattn/core/dtype.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DType, SizesNamesAndTraits) {
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kF16), 2);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kI32), 4);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_size(DType::kU8), 1);
  EXPECT_EQ(dtype_name(DType::kBF16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::kF32), "float32");
  EXPECT_EQ(dtype_name(DType::kI64), "int64");
  std::ostringstream os;
  os << DType::kF16 << " " << Device::cpu() << " " << Device::cuda(3);
  EXPECT_EQ(os.str(), "float16 cpu cuda:3");
  static_assert(dtype_of<float>() == DType::kF32);
  static_assert(dtype_of<bf16_t>() == DType::kBF16);
  static_assert(dtype_of<f16_t>() == DType::kF16);
  static_assert(dtype_of<int32_t>() == DType::kI32);
  static_assert(dtype_of<int64_t>() == DType::kI64);
  static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2);
}

// ---- bf16 ----

TEST(BF16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const bf16_t v{static_cast<uint16_t>(b)};
    const float f = bf16_to_float(v);
    EXPECT_EQ(float_bits(f), b << 16) << "bits " << std::hex << b;
    const bf16_t back = float_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(back))) << "NaN " << std::hex << b << " lost";
      EXPECT_EQ(back.bits & 0x8000u, b & 0x8000u) << "NaN sign " << std::hex << b;
    } else {
      EXPECT_EQ(back.bits, b) << "bits " << std::hex << b;
    }
  }
}

TEST(BF16, RoundsToNearestEvenOnEdgeCases) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80},  // 1.0
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: tie, even stays
      {0x3f818000u, 0x3f82},  // tie, odd rounds up to even
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below the tie
      {0xbf808000u, 0xbf80},  // negative tie
      {0xbf818000u, 0xbf82},
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to +inf
      {0xff7fffffu, 0xff80},  // -FLT_MAX rounds to -inf
      {0x7f7f7fffu, 0x7f7f},  // largest value that stays finite
      {0x7f7f8000u, 0x7f80},  // tie at the top: odd mantissa rounds up to inf
      {0x7f800000u, 0x7f80},  // +inf
      {0xff800000u, 0xff80},  // -inf
      {0x00000000u, 0x0000},  // +0
      {0x80000000u, 0x8000},  // -0
      {0x00000001u, 0x0000},  // smallest float subnormal
      {0x00008000u, 0x0000},  // subnormal tie, even
      {0x00018000u, 0x0002},  // subnormal tie, odd
      {0x0000ffffu, 0x0001},
      {0x007fffffu, 0x0080},  // largest subnormal rounds up to the smallest normal
      {0x80008001u, 0x8001},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(float_to_bf16(bits_to_float(c.in)).bits, c.out) << "in " << std::hex << c.in;
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fffffffu, 0x7f810000u}) {
    const bf16_t r = float_to_bf16(bits_to_float(nan));
    EXPECT_TRUE(std::isnan(bf16_to_float(r))) << "NaN " << std::hex << nan << " became "
                                              << r.bits;
    EXPECT_EQ(r.bits & 0x8000u, (nan >> 16) & 0x8000u);
  }
}

// The finite values of a 16-bit format, ascending, with their bit patterns.
struct Grid {
  std::vector<double> value;
  std::vector<uint16_t> bits;
};

template <typename ToFloat>
Grid finite_grid(ToFloat to_float) {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = to_float(static_cast<uint16_t>(b));
    if (std::isfinite(f) && b != 0x8000u) v.emplace_back(f, static_cast<uint16_t>(b));
  }
  std::sort(v.begin(), v.end());
  Grid g;
  for (auto& [x, b] : v) {
    g.value.push_back(x);
    g.bits.push_back(b);
  }
  return g;
}

// Round to nearest, ties to even, saturating to inf past max + half an ulp (IEEE 754).
// Returns the expected 16-bit pattern of a finite float x.
uint16_t nearest_even(const Grid& g, double x, double overflow_at, uint16_t inf_bits) {
  const bool neg = std::signbit(x);
  const double a = std::abs(x);
  const uint16_t sign = neg ? 0x8000 : 0;
  if (a >= overflow_at) return static_cast<uint16_t>(sign | inf_bits);
  // Search the non-negative half of the grid.
  auto it = std::lower_bound(g.value.begin(), g.value.end(), a);
  const size_t hi = static_cast<size_t>(it - g.value.begin());
  if (hi == g.value.size()) return static_cast<uint16_t>(sign | g.bits.back());  // (max, tie)
  if (hi < g.value.size() && g.value[hi] == a) return static_cast<uint16_t>(sign | g.bits[hi]);
  const size_t lo = hi - 1;  // a > 0 == value of the first non-negative entry
  const double dlo = a - g.value[lo], dhi = g.value[hi] - a;
  size_t pick;
  if (dlo < dhi) {
    pick = lo;
  } else if (dhi < dlo) {
    pick = hi;
  } else {
    pick = (g.bits[lo] & 1u) == 0 ? lo : hi;
  }
  return static_cast<uint16_t>(sign | g.bits[pick]);
}

// Candidates where rounding goes wrong: exact values, exact ties and one float ulp either side,
// plus random floats across the exponent range.
template <typename ToFloat, typename FromFloat>
void check_rounding(ToFloat to_float, FromFloat from_float, uint16_t inf_bits) {
  Grid all = finite_grid(to_float);
  Grid pos;
  for (size_t i = 0; i < all.value.size(); ++i) {
    if (all.value[i] >= 0) {
      pos.value.push_back(all.value[i]);
      pos.bits.push_back(all.bits[i]);
    }
  }
  const double max = pos.value.back();
  const double ulp_top = max - pos.value[pos.value.size() - 2];
  const double overflow_at = max + ulp_top / 2;  // the tie with the next (infinite) step rounds up
  std::vector<float> probes;
  for (size_t i = 0; i + 1 < pos.value.size(); ++i) {
    const float mid = static_cast<float>((pos.value[i] + pos.value[i + 1]) / 2);
    for (float x : {static_cast<float>(pos.value[i]), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e30f)}) {
      probes.push_back(x);
      probes.push_back(-x);
    }
  }
  const auto top_mid = static_cast<float>(overflow_at);
  probes.insert(probes.end(), {top_mid, std::nextafter(top_mid, 0.0f), -top_mid,
                               std::numeric_limits<float>::max()});
  std::mt19937_64 rng(test::case_seed());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_to_float(bits(rng));
    if (std::isfinite(f)) probes.push_back(f);
  }
  int failures = 0;
  for (float x : probes) {
    const uint16_t want = nearest_even(pos, x, overflow_at, inf_bits);
    const uint16_t got = from_float(x);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << "float " << x << " (bits 0x" << std::hex << float_bits(x) << ") -> 0x"
                    << got << ", expected 0x" << want;
    }
  }
  EXPECT_EQ(failures, 0) << "of " << probes.size() << " probes";
}

TEST(BF16, MatchesBruteForceNearestEven) {
  check_rounding([](uint16_t b) { return bf16_to_float(bf16_t{b}); },
                 [](float f) { return float_to_bf16(f).bits; }, 0x7f80);
}

// ---- fp16 ----

TEST(F16, KnownValues) {
  EXPECT_EQ(f16_to_float(f16_t{0x3c00}), 1.0f);
  EXPECT_EQ(f16_to_float(f16_t{0xc000}), -2.0f);
  EXPECT_EQ(f16_to_float(f16_t{0x7bff}), 65504.0f);
  EXPECT_EQ(f16_to_float(f16_t{0x0400}), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_float(f16_t{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(f16_t{0x03ff}), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(f16_to_float(f16_t{0x8000})));
  EXPECT_EQ(f16_to_float(f16_t{0x8000}), 0.0f);
  EXPECT_EQ(f16_to_float(f16_t{0x7c00}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(f16_t{0xfc00}), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_float(f16_t{0x7e00})));
  EXPECT_TRUE(std::isnan(f16_to_float(f16_t{0x7c01})));

  EXPECT_EQ(float_to_f16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float_to_f16(65519.0f).bits, 0x7bff);  // below the tie with 65536
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7c00);  // tie: rounds to even = inf
  EXPECT_EQ(float_to_f16(1e10f).bits, 0x7c00);
  EXPECT_EQ(float_to_f16(-1e10f).bits, 0xfc00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)).bits, 0x0000);        // tie at the bottom
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)).bits, 0x0002);        // 1.5 ulp: tie to even
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -26)).bits, 0x0000);
  EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  EXPECT_EQ(float_to_f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);  // tie, even
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(3.0f, -11)).bits, 0x3c02);  // tie, odd -> even
  EXPECT_EQ(float_to_f16(std::ldexp(1023.5f, -24)).bits, 0x0400);     // subnormal -> normal
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()).bits, 0x7c00);
}

TEST(F16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = f16_to_float(f16_t{static_cast<uint16_t>(b)});
    const f16_t back = float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(back))) << "NaN " << std::hex << b << " lost";
    } else {
      EXPECT_EQ(back.bits, b) << "bits " << std::hex << b;
    }
  }
}

TEST(F16, MatchesBruteForceNearestEven) {
  check_rounding([](uint16_t b) { return f16_to_float(f16_t{b}); },
                 [](float f) { return float_to_f16(f).bits; }, 0x7c00);
}

TEST(DType, TemplatedConversionsAgree) {
  for (float x : {0.1f, -3.75f, 1e-3f, 300.5f}) {
    EXPECT_EQ(to_float(from_float<bf16_t>(x)), bf16_to_float(float_to_bf16(x)));
    EXPECT_EQ(to_float(from_float<f16_t>(x)), f16_to_float(float_to_f16(x)));
    EXPECT_EQ(to_float(from_float<float>(x)), x);
  }
}

}  // namespace
}  // namespace kvattn
