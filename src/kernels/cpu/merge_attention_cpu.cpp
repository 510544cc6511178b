// CPU merge_attention_states: one pass over the rows, float32 weights per (token, head)
// (merge_weights), tokens spread over OpenMP threads when the problem is large enough to pay
// for them. Each element is read from both sides before it is written, so out may alias out_a
// or out_b and lse may alias lse_a or lse_b.
#include <cmath>
#include <limits>

#include "kernels/merge_attention_backend.h"

namespace kvattn::cpu {
namespace {

template <typename T>
void merge_rows(const MergeStatesArgs& a) {
  const int64_t tokens = a.out_a.size(0), heads = a.out_a.size(1), d = a.out_a.size(2);
  const T* oa = a.out_a.ptr<const T>();
  const T* ob = a.out_b.ptr<const T>();
  T* out = a.out.ptr<T>();
  const float* lse_a = a.lse_a.ptr<const float>();
  const float* lse_b = a.lse_b.ptr<const float>();
  float* lse = a.lse.defined() ? a.lse.ptr<float>() : nullptr;
  const int64_t sa = a.out_a.stride(0), sb = a.out_b.stride(0), so = a.out.stride(0);
  // Head strides of the lse arrays (>= tokens; one head: any).
  const int64_t la = a.lse_a.stride(0), lb = a.lse_b.stride(0);
  const int64_t lo = a.lse.defined() ? a.lse.stride(0) : 0;
  const bool parallel = tokens * heads * d >= (int64_t{1} << 16);
  const T nan = from_float<T>(std::numeric_limits<float>::quiet_NaN());

#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const MergeWeights w = merge_weights(lse_a[h * la + t], lse_b[h * lb + t]);
      const T* ra = oa + t * sa + h * d;
      const T* rb = ob + t * sb + h * d;
      T* ro = out + t * so + h * d;
      if (w.nan) {
        for (int64_t x = 0; x < d; ++x) ro[x] = nan;
      } else if (w.use_a && w.use_b) {
        for (int64_t x = 0; x < d; ++x) {
          ro[x] = from_float<T>(to_float(ra[x]) * w.fa + to_float(rb[x]) * w.fb);
        }
      } else {  // one side (weight 1) or none (zeros)
        const T* r = w.use_a ? ra : rb;
        const float f = w.use_a ? w.fa : w.fb;
        const bool any = w.use_a || w.use_b;
        for (int64_t x = 0; x < d; ++x) ro[x] = from_float<T>(any ? to_float(r[x]) * f : 0.0f);
      }
      if (lse != nullptr) lse[h * lo + t] = w.lse;
    }
  }
}

}  // namespace

void merge_attention_states(const MergeStatesArgs& a) {
  switch (a.out_a.dtype) {
    case DType::kF32: merge_rows<float>(a); break;
    case DType::kBF16: merge_rows<bf16_t>(a); break;
    case DType::kF16: merge_rows<f16_t>(a); break;
    default: KVATTN_FAIL("merge_attention_states (cpu): unsupported dtype ", a.out_a.dtype);
  }
}

}  // namespace kvattn::cpu
