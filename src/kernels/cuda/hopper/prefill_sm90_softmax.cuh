// Online softmax of a consumer warpgroup, split so that it can run while the previous tile's
// O += P V is still in flight: update() folds a tile of scores in and returns each row's
// correction factor without touching O; rescale() applies it once that GEMM has completed.
// Layout as in prefill_softmax.cuh (a warp owns 16 rows; a thread rows g and g + 8, two
// adjacent columns per 8-column tile); scores stay raw, p = exp2(s * scale_log2 - max_scaled).
#pragma once

#include <cmath>

#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

struct RowSoftmax {
  float row_max[2];  // raw running max (-inf while the row has seen no key)
  float row_sum[2];  // this thread's partial sum of p (reduced across the quad at the end)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_max[hr] = -INFINITY;
      row_sum[hr] = 0.0f;
    }
  }

  // s <- p = exp(scale * (s - new_max)); corr <- exp(scale * (old_max - new_max)). A row that
  // has seen no key keeps max = -inf and gets p = 0 (its max is taken as 0 for the
  // subtraction, so -inf - -inf never happens). update_max then update_exp is update, split
  // so that a caller can put a wait between the two (Tile::kMaxBeforeWait).
  template <int kNT>
  __device__ __forceinline__ void update(float (&s)[kNT][4], float scale_log2, float (&corr)[2]) {
    float mx_scaled[2];
    update_max(s, scale_log2, corr, mx_scaled);
    update_exp(s, scale_log2, corr, mx_scaled);
  }

  // Each row's new max (row_max), its scaled form for update_exp, and corr.
  template <int kNT>
  __device__ __forceinline__ void update_max(const float (&s)[kNT][4], float scale_log2,
                                             float (&corr)[2], float (&mx_scaled)[2]) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = row_max[hr];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][hr * 2], s[nt][hr * 2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx_scaled[hr] = mx == -INFINITY ? 0.0f : mx * scale_log2;
      corr[hr] = ptx::exp2_approx(row_max[hr] * scale_log2 - mx_scaled[hr]);
      row_max[hr] = mx;
    }
  }

  // s <- p and the rows' running sums, from update_max's results.
  template <int kNT>
  __device__ __forceinline__ void update_exp(float (&s)[kNT][4], float scale_log2,
                                             const float (&corr)[2], const float (&mx_scaled)[2]) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = row_sum[hr] * corr[hr];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = ptx::exp2_approx(fmaf(s[nt][hr * 2 + e], scale_log2, -mx_scaled[hr]));
          s[nt][hr * 2 + e] = p;
          sum += p;
        }
      }
      row_sum[hr] = sum;
    }
  }

  template <int kDT>
  __device__ __forceinline__ static void rescale(float (&o)[kDT][4], const float (&corr)[2]) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[0];
      o[dt][2] *= corr[1];
      o[dt][3] *= corr[1];
    }
  }

  // After the last tile: 1/sum (0 for a row that saw no key, so its output is exactly 0) and
  // the natural-log LSE (-inf for such a row), reduced over the quad.
  __device__ __forceinline__ void finish(float (&inv_sum)[2], float (&lse)[2], float scale) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = row_sum[hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const bool empty = !(sum > 0.0f);
      inv_sum[hr] = empty ? 0.0f : 1.0f / sum;
      lse[hr] = empty ? -INFINITY : row_max[hr] * scale + logf(sum);
    }
  }
};

}  // namespace kvattn::cuda::sm90
