// The epilogue of a consumer warpgroup: O / rowsum to 16 bits, written straight from the
// accumulator registers (each quad of lanes writes 16 contiguous bytes of a row per column
// tile), and the natural-log LSE from lane t == 0 of each quad. Rows past the sequence's Lq
// are not written; a row that saw no key writes zeros and LSE = -inf.
#pragma once

#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_softmax.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <typename T, int D>
__device__ __forceinline__ void store_output(const PrefillParams& p, float (&o)[D / 8][4],
                                             RowSoftmax& softmax, int h, int q_begin, int row0,
                                             int Lq) {
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2;
  const int t = lane & 3;
  float inv_sum[2];
  float lse[2];
  softmax.finish(inv_sum, lse, p.scale);
  const int warp_row = row0 + warp * 16;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = warp_row + g + 8 * hr;
    if (row >= Lq) continue;
    T* dst = static_cast<T*>(p.out) + static_cast<int64_t>(q_begin + row) * p.o_stride +
             static_cast<int64_t>(h) * D + 2 * t;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(dst + dt * 8) =
          ptx::pack2<T>(o[dt][2 * hr] * inv_sum[hr], o[dt][2 * hr + 1] * inv_sum[hr]);
    }
    if (p.lse != nullptr && t == 0) {
      p.lse[static_cast<int64_t>(h) * p.lse_head_stride + q_begin + row] = lse[hr];
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
