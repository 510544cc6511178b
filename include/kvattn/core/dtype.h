// Element types and the host-side conversions between bf16/fp16 bit patterns and float.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

#include "kvattn/core/fp8.h"

namespace kvattn {

// kF8E4M3: OCP e4m3fn bytes (fp8.h); only a KV cache holds it, read with per-head scales.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kF8E4M3: return "float8_e4m3";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// Storage types for 16-bit floats on the host: raw bit patterns, converted explicitly.
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

inline float bf16_to_float(bf16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40u)};
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

float f16_to_float(f16_t v);
f16_t float_to_f16(float f);

template <typename T>
inline float to_float(T v);
template <>
inline float to_float<float>(float v) { return v; }
template <>
inline float to_float<bf16_t>(bf16_t v) { return bf16_to_float(v); }
template <>
inline float to_float<f16_t>(f16_t v) { return f16_to_float(v); }
template <>
inline float to_float<f8e4m3_t>(f8e4m3_t v) { return e4m3_to_float(v.bits); }

template <typename T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline bf16_t from_float<bf16_t>(float v) { return float_to_bf16(v); }
template <>
inline f16_t from_float<f16_t>(float v) { return float_to_f16(v); }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kF32; }
template <>
constexpr DType dtype_of<f16_t>() { return DType::kF16; }
template <>
constexpr DType dtype_of<bf16_t>() { return DType::kBF16; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <>
constexpr DType dtype_of<f8e4m3_t>() { return DType::kF8E4M3; }

}  // namespace kvattn
