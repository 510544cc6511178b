// FP8 e4m3 (OCP "e4m3fn", torch.float8_e4m3fn) on the host: the element type of an fp8 KV
// cache. Encoding: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities;
// S.1111.111 is NaN (0x7f, 0xff); the largest finite value is +-448 (S.1111.110); subnormals
// are m * 2^-9 (exponent field 0).
//
// float_to_e4m3 rounds to nearest, ties to even, and saturates: |x| > 448 and +-Inf become
// +-448 (vLLM's and TensorRT-LLM's convention for KV caches: one outlier token must not turn
// a cache entry into NaN, which would poison every later softmax of that head); NaN stays
// NaN (0x7f / 0xff, sign kept); -0 stays -0 (0x80).
#pragma once

#include <cstdint>

namespace kvattn {

struct f8e4m3_t {
  uint8_t bits;
};

inline constexpr float kE4M3Max = 448.0f;

// Exact value of a code (every e4m3 value is a float32).
float e4m3_to_float(uint8_t code);
// Round to nearest even with saturation to +-448 (see above).
uint8_t float_to_e4m3(float x);
// The 256 decoded values, indexed by code (the CPU kernels' dequantisation table).
const float* e4m3_table();

// The quantisation of an fp8 KV cache with a per-(layer, KV head) scale:
//   stored = e4m3(sat(x / scale)),  read back as e4m3_to_float(stored) * scale.
inline uint8_t quantize_e4m3(float x, float scale) { return float_to_e4m3(x / scale); }

}  // namespace kvattn
