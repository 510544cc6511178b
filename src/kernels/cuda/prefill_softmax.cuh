// Masking and the online softmax of the prefill kernel, on the mma.sync C fragments.
//
// A warp owns kMT row tiles of 16 rows; a thread holds two rows per tile (g and g + 8, see
// ptx.cuh) and, in each n8 column tile, two adjacent columns. Scores stay raw (unscaled):
// p = exp2(s * scale_log2 - max * scale_log2) is one FFMA and one MUFU.EX2 per element.
#pragma once

#include <cmath>

#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

// Sets to -inf every score whose key is not visible: col >= Lk, or (causal, bottom-right
// aligned) col > row + (Lk - Lq). row0: this thread's first row (tile 0, row g) in sequence
// coordinates; col0: its first column (n8 tile 0, column 2t) in sequence coordinates.
template <bool kCausal, int kMT, int kNT>
__device__ __forceinline__ void apply_mask(float (&s)[kMT][kNT][4], int row0, int col0, int Lk,
                                           int causal_offset) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = row0 + mt * 16 + hr * 8;
      const int limit = kCausal ? min(Lk, row + causal_offset + 1) : Lk;  // visible: col < limit
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col0 + nt * 8 + e >= limit) s[mt][nt][hr * 2 + e] = -INFINITY;
        }
      }
    }
  }
}

template <int kMT>
struct OnlineSoftmax {
  float row_max[kMT][2];  // raw running max (-inf while the row has seen no key)
  float row_sum[kMT][2];  // this thread's partial sum of p (reduced across the quad at the end)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        row_max[mt][hr] = -INFINITY;
        row_sum[mt][hr] = 0.0f;
      }
    }
  }

  // Folds one tile of scores in: updates max and sum, rescales the output accumulators o, and
  // overwrites s with p = exp(scale * (s - max)). A fully masked row keeps max = -inf and gets
  // p = 0 (its max is taken as 0 for the subtraction, so -inf - -inf never happens).
  template <int kNT, int kDT>
  __device__ __forceinline__ void update(float (&s)[kMT][kNT][4], float (&o)[kMT][kDT][4],
                                         float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = row_max[mt][hr];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mx = fmaxf(mx, fmaxf(s[mt][nt][hr * 2], s[mt][nt][hr * 2 + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mx_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        const float corr = ptx::exp2_approx(row_max[mt][hr] * scale_log2 - mx_scaled);
        row_max[mt][hr] = mx;
        float sum = row_sum[mt][hr] * corr;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o[mt][dt][hr * 2] *= corr;
          o[mt][dt][hr * 2 + 1] *= corr;
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = ptx::exp2_approx(fmaf(s[mt][nt][hr * 2 + e], scale_log2, -mx_scaled));
            s[mt][nt][hr * 2 + e] = p;
            sum += p;
          }
        }
        row_sum[mt][hr] = sum;
      }
    }
  }

  // After the last tile: reduces the sums over the quad; returns 1/sum (0 for a row that saw no
  // key, so its output is exactly 0) and the natural-log LSE (-inf for such a row).
  __device__ __forceinline__ void finish(float (&inv_sum)[kMT][2], float (&lse)[kMT][2],
                                         float scale) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float sum = row_sum[mt][hr];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const bool empty = !(sum > 0.0f);
        inv_sum[mt][hr] = empty ? 0.0f : 1.0f / sum;
        lse[mt][hr] = empty ? -INFINITY : row_max[mt][hr] * scale + logf(sum);
      }
    }
  }
};

}  // namespace kvattn::cuda
