// One element to a float8_e4m3 cache code on the GPU, stored = e4m3(sat(x / scale)), bit-exactly
// as the CPU backend's quantize_e4m3 (core/fp8.h): x / scale is the IEEE-rounded float32
// division, the conversion rounds to nearest even and saturates (+-Inf and |x| > 448 to +-448),
// NaN stays NaN with its sign, -0 stays -0. Shared by store_kv_fp8.cu and the engine's fused
// q/k-norm + RoPE + KV write (engine/model/cuda_kernels.cu), so both write the same bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace kvattn::cuda {

template <typename T>
__device__ __forceinline__ float fp8_source_to_f32(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

// The sign of a NaN is taken from the element's bits: the GPU's half -> float conversion and
// division return the canonical (positive) NaN.
template <typename T>
__device__ __forceinline__ bool fp8_source_sign(T v) {
  if constexpr (sizeof(T) == 2) {
    return (*reinterpret_cast<const uint16_t*>(&v) & 0x8000u) != 0;
  } else {
    return (__float_as_uint(v) & 0x80000000u) != 0;
  }
}

// T: float, __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ uint8_t quantize_e4m3(T v, float scale) {
  const float x = fp8_source_to_f32(v);
  if (isnan(x)) return fp8_source_sign(v) ? 0xffu : 0x7fu;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace kvattn::cuda
