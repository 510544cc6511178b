// Internal: the backends behind merge_attention_states (the entry has validated everything and
// tokens > 0), and the per-row weights both compute the same way, in float32.
#pragma once

#include <cmath>

#include "kvattn/kernels/merge_attention.h"

#if defined(__CUDACC__)
#define KVATTN_MERGE_HD __host__ __device__ __forceinline__
#else
#define KVATTN_MERGE_HD inline
#endif

namespace kvattn {

// out = use_a ? out_a * fa : 0  +  use_b ? out_b * fb : 0, and lse, for one (token, head).
// Relative to the larger lse m: the larger side weighs 1 and the other e = exp(-|lse_a - lse_b|)
// in [0, 1], so nothing over- or underflows whatever the magnitudes, and
// lse = m + log1p(e) keeps its precision when e is tiny. A side with lse -inf is not read
// (use_* false), so its out row may hold anything; with one side -inf the other passes through
// exactly (weight 1, lse unchanged).
struct MergeWeights {
  float fa, fb, lse;
  bool use_a, use_b;
  bool nan;  // an lse was NaN or +inf: the row is NaN
};

KVATTN_MERGE_HD MergeWeights merge_weights(float la, float lb) {
  constexpr float kInf = __builtin_huge_valf();
  MergeWeights w{0.0f, 0.0f, -kInf, la != -kInf, lb != -kInf, false};
  if (la != la || lb != lb || la == kInf || lb == kInf) {
    w.nan = true;
    w.lse = __builtin_nanf("");
    return w;
  }
  if (!w.use_a && !w.use_b) return w;  // no key on either side: zeros, -inf
  const float e = expf(-fabsf(la - lb));  // 0 when one side is -inf
  const float inv = 1.0f / (1.0f + e);
  const bool a_major = la >= lb;
  w.fa = a_major ? inv : e * inv;
  w.fb = a_major ? e * inv : inv;
  w.lse = (a_major ? la : lb) + log1pf(e);
  return w;
}

namespace cpu {
void merge_attention_states(const MergeStatesArgs& args);
}  // namespace cpu

#ifdef KVATTN_WITH_CUDA
namespace cuda {
void merge_attention_states(const MergeStatesArgs& args);
}  // namespace cuda
#endif

}  // namespace kvattn
