// e4m3 encode/decode on the host (contracts in fp8.h).
#include "kvattn/core/fp8.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvattn {

float e4m3_to_float(uint8_t code) {
  const bool neg = (code & 0x80u) != 0;
  const uint32_t exp = (code >> 3) & 0xfu;
  const uint32_t man = code & 0x7u;
  float mag;
  if (exp == 0xfu && man == 0x7u) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: m * 2^-9
  } else {
    mag = std::ldexp(static_cast<float>(8 + man), static_cast<int>(exp) - 10);  // 1.m * 2^(e-7)
  }
  return neg ? -mag : mag;
}

uint8_t float_to_e4m3(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 or Inf: saturate
  if (abs < 0x3c800000u) {  // below 2^-6: subnormal (or zero), a multiple of 2^-9
    float a;
    std::memcpy(&a, &abs, 4);
    // Exact scaling, then round half to even; 8 * 2^-9 = 2^-6 lands on code 0x08, the
    // smallest normal, which is the right encoding too.
    const auto m = static_cast<uint32_t>(std::nearbyint(a * 512.0f));
    return static_cast<uint8_t>(sign | m);
  }
  // Normal: rebias the exponent (127 -> 7) in place, then round the 23-bit mantissa to 3 bits
  // (ties to even). The result stays <= 0x7e: every input is below 448.
  uint32_t r = abs - (120u << 23);
  r += 0x7ffffu + ((r >> 20) & 1u);
  return static_cast<uint8_t>(sign | (r >> 20));
}

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

}  // namespace kvattn
