// float8_e4m3 codes to the 16-bit mma operand types on the GPU, exactly, with integer
// operations: shared by the decode (decode_fp8.cuh) and prefill (prefill_kernel.cuh) kernels
// that read fp8 KV caches.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kvattn::cuda {

__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Four e4m3 codes (bytes 0-3 of q) as two packed pairs of T: lo = (byte 0, byte 2), hi =
// (byte 1, byte 3), exactly for every finite code. Integer operations only, plus one
// multiply: the GPU's conversion instructions run at a quarter of the integer rate, and four
// of them per pair held the first version of this kernel to ~2 TB/s (docs/perf/NOTES.md).
// A code s.eeee.mmm placed with its sign at bit 15 of a 16-bit half and e.m at bits
// [14 - k, 8 - k] (k = 4 for bf16's 8 exponent bits, 1 for f16's 5) reads as
// e4m3 * 2^(7 - bias(T)); multiplying by 2^(bias(T) - 7) is exact, subnormal codes included
// (they become subnormal T operands of the multiply). The NaN codes 0x7f / 0xff read as
// +-480 (the CPU backend reads NaN); store_kv writes them only for NaN inputs.
template <typename T>
__device__ __forceinline__ void e4m3x4_to(uint32_t q, uint32_t& lo, uint32_t& hi) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kShift = kBf16 ? 4 : 1;
  constexpr uint32_t kEm = (0x7f00u >> kShift) * 0x10001u;
  const uint32_t q8 = q << 8;
  const uint32_t h = (q & 0x80008000u) | ((q >> kShift) & kEm);
  const uint32_t l = (q8 & 0x80008000u) | ((q8 >> kShift) & kEm);
  if constexpr (kBf16) {
    const __nv_bfloat162 rebias = __halves2bfloat162(__ushort_as_bfloat16(0x7b80u),   // 2^120
                                                     __ushort_as_bfloat16(0x7b80u));
    const __nv_bfloat162 a = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&l), rebias);
    const __nv_bfloat162 b = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&h), rebias);
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  } else {
    const __half2 rebias = __halves2half2(__ushort_as_half(0x5c00u), __ushort_as_half(0x5c00u));  // 2^8
    const __half2 a = __hmul2(*reinterpret_cast<const __half2*>(&l), rebias);
    const __half2 b = __hmul2(*reinterpret_cast<const __half2*>(&h), rebias);
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  }
}

// The hardware conversion (sm_89+: cvt.rn.f16x2.e4m3x2, one F2FP.F16.E4M3.UNPACK_B a pair;
// H200: 1.67x e4m3x4_to's rate and on another pipe, bench/micro/fp8_convert_rate.cu): the
// codes in bytes 0 and 1 of w as an f16 pair (byte 0 -> the low half). Exact for every finite
// code; the NaN codes give NaN (as the CPU backend reads them; e4m3x4_to reads +-480). f16
// only: sm_90 has no bf16 form. Elsewhere the integer form, with the same results for every
// finite code.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(static_cast<uint16_t>(w)));
  return r;
#else
  uint32_t lo, hi;  // bytes 0 and 1 to bytes 0 and 2, the pair e4m3x4_to puts in lo
  e4m3x4_to<__half>(byte_perm(w, 0, 0x4140u), lo, hi);
  return lo;
#endif
}

// Four e4m3 codes as two f16 pairs of adjacent codes: lo = (byte 0, byte 1), hi = (byte 2,
// byte 3), by the hardware conversion reading each 16-bit half of q in place (one F2FP a pair,
// no byte permute: `mov.b32 {lo, hi}` lets ptxas select the half, F2FP ... R.H1). Exact for
// every finite code; NaN codes give NaN. Elsewhere (before sm_89) the integer form after one
// byte permute, with the same results for every finite code.
__device__ __forceinline__ void e4m3x4_to_f16_halves(uint32_t q, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n"
      "  .reg .b16 q_lo, q_hi;\n"
      "  mov.b32 {q_lo, q_hi}, %2;\n"
      "  cvt.rn.f16x2.e4m3x2 %0, q_lo;\n"
      "  cvt.rn.f16x2.e4m3x2 %1, q_hi;\n"
      "}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(q));
#else
  e4m3x4_to<__half>(byte_perm(q, 0, 0x3120u), lo, hi);  // bytes (0, 2, 1, 3): pairs (0,1), (2,3)
#endif
}

}  // namespace kvattn::cuda
