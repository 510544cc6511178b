// The fp8 decode's prescale of bf16 queries before they are rewritten in f16
// (fp8_q_prescale.h): no overflow in f16 for any finite bf16 magnitude, the largest value in
// [2^14, 2^15) wherever the clamp allows, finite scales both ways, and no scaling for 0, Inf, NaN.
#include "kernels/cuda/decode/fp8_q_prescale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace {

using kvattn::cuda::fp8_q_prescale_exp;

float from_bf16_bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(Fp8QPrescale, EveryFiniteBf16MagnitudeFitsF16) {
  int checked = 0;
  for (uint32_t b = 1; b < 0x7f80u; ++b) {  // every positive finite bf16, subnormals included
    const float mx = from_bf16_bits(static_cast<uint16_t>(b));
    const int e = fp8_q_prescale_exp(mx);
    const float scaled = std::ldexp(mx, -e);
    ASSERT_LT(scaled, 32768.0f) << "bf16 bits 0x" << std::hex << b;
    ASSERT_TRUE(std::isnormal(std::ldexp(1.0f, -e))) << "2^-e, bf16 bits 0x" << std::hex << b;
    ASSERT_TRUE(std::isnormal(std::ldexp(1.0f, e))) << "2^e, bf16 bits 0x" << std::hex << b;
    // Where the clamp does not bind, the largest value sits in [2^14, 2^15).
    if (e > -110) {
      ASSERT_GE(scaled, 16384.0f) << "bf16 bits 0x" << std::hex << b;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 0x7f7f);
}

TEST(Fp8QPrescale, ZeroInfAndNanAreNotScaled) {
  EXPECT_EQ(fp8_q_prescale_exp(0.0f), 0);
  EXPECT_EQ(fp8_q_prescale_exp(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(fp8_q_prescale_exp(std::numeric_limits<float>::quiet_NaN()), 0);
}

TEST(Fp8QPrescale, ExamplesAtPowersOfTwo) {
  EXPECT_EQ(fp8_q_prescale_exp(1.0f), -14);       // 1 -> 2^14
  EXPECT_EQ(fp8_q_prescale_exp(0.75f), -15);      // 0.75 -> 24576
  EXPECT_EQ(fp8_q_prescale_exp(65504.0f), 1);     // f16's largest -> 32752
  EXPECT_EQ(fp8_q_prescale_exp(std::ldexp(1.0f, -120)), -110);  // clamped
}

}  // namespace
