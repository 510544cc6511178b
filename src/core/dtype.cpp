#include "kvattn/core/dtype.h"

#include <cmath>

namespace kvattn {

float f16_to_float(f16_t v) {
  const uint32_t sign = (v.bits & 0x8000u) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1fu;
  const uint32_t man = v.bits & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
    return sign ? -out : out;
  }
  uint32_t u;
  if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);  // inf or NaN
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  std::memcpy(&out, &u, 4);
  return out;
}

f16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return f16_t{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return f16_t{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow
  if (abs < 0x38800000u) {  // subnormal or zero: round half to even at 2^-24
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // exact: a is < 2^-14
    return f16_t{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15 (in place)
  r += 0xfffu + ((r >> 13) & 1u);
  return f16_t{static_cast<uint16_t>(sign | (r >> 13))};
}

}  // namespace kvattn
