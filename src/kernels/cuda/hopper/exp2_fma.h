// 2^x on the FMA pipe, for the Hopper prefill's softmax (prefill_sm90_softmax.cuh), and which of
// a key tile's 8-column tiles take it. At head_dim 64 a score costs the tensor cores as many
// cycles as its exponential costs the MUFU (256 FLOP at 4,096 a clock an SM against one ex2 at
// 16), so moving a share of the exponentials onto the FMA pipe (FlashAttention-4's trick)
// relieves the softmax; each moved one costs ~9 FMA / ALU instructions instead of one MUFU.
// Plain C++ (host and device), so the CPU tests check it bit for bit as the GPU computes it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVATTN_EXP2_HD __host__ __device__ __forceinline__
#else
#define KVATTN_EXP2_HD inline
#endif

namespace kvattn::cuda {

KVATTN_EXP2_HD uint32_t exp2_fma_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

KVATTN_EXP2_HD float exp2_fma_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// For the softmax's x = s * scale_log2 - max <= ~0: x = j + f with j the nearest integer (adding
// 1.5 * 2^23 rounds x to it and leaves it in the low mantissa bits) and f in [-0.5, 0.5]; 2^f by
// a cubic fitted for relative error (at most 7.5e-5 in float32 arithmetic, under the rounding of
// the bf16 or fp16 P it feeds); j is added to the exponent field. Every operation is an add or an
// explicit fma, so host and device round alike. x < -125, where that field would underflow,
// gives exactly 0 (ex2.approx.ftz gives 0 below -126 and a normal float in (-126, -125]: both
// far below the row's largest term, 1); -inf (a masked score) gives 0; NaN stays NaN.
KVATTN_EXP2_HD float exp2_fma(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float t = x + kRound;
  const float f = x - (t - kRound);
  const float p = fmaf(fmaf(fmaf(0.05517144128680229f, f, 0.24261070787906647f), f,
                            0.6932609677314758f),
                       f, 0.9999281167984009f);
  const float r = exp2_fma_float(exp2_fma_bits(p) + (exp2_fma_bits(t) << 23));
  return x < -125.0f ? 0.0f : r;
}

// Whether 8-column tile nt (of kNT) takes exp2_fma: kPolyTiles of the kNT, spread evenly.
template <int kPolyTiles, int kNT>
KVATTN_EXP2_HD constexpr bool poly_exp_tile(int nt) {
  static_assert(kPolyTiles >= 0 && kPolyTiles <= kNT);
  return (nt * kPolyTiles) % kNT < kPolyTiles;
}

}  // namespace kvattn::cuda
