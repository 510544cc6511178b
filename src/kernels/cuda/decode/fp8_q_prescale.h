// The power of two by which the fp8 decode scales a warp's bf16 queries before rewriting them in
// f16 (decode_fp8.cuh, fp8_q_to_f16): q * 2^-e, with e chosen from the warp's largest |q|.
// Plain C++ (host and device), so the CPU tests check it without a GPU.
#pragma once

#include <algorithm>
#include <cmath>

#if defined(__CUDACC__)
#define KVATTN_Q_PRESCALE_HD __host__ __device__
#else
#define KVATTN_Q_PRESCALE_HD
#endif

namespace kvattn::cuda {

// For finite mx > 0: mx * 2^-e lies in [2^14, 2^15), below f16's largest finite value (65504),
// with f16's full precision for every value down to 2^-10 of mx; e stays >= -110 so that 2^-e
// and the softmax scale times 2^e stay finite normal floats (a warp whose largest |q| is below
// 2^-95 is then scaled less and rounds its tiniest values). 0 for 0, Inf and NaN: those are
// converted unscaled (Inf and NaN then propagate, as in the reference).
KVATTN_Q_PRESCALE_HD inline int fp8_q_prescale_exp(float mx) {
  if (!(mx > 0.0f) || std::isinf(mx)) return 0;
  int x = 0;
  (void)std::frexp(mx, &x);  // mx in [2^(x-1), 2^x)
  return std::max(-110, x - 15);
}

}  // namespace kvattn::cuda
