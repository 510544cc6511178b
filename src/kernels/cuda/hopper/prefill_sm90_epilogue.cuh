// The epilogue of a consumer warpgroup: O / rowsum to 16 bits, staged through shared memory
// (store_output_staged, the default tiles at head_dim 64/128) or written straight from the
// accumulator registers (store_output: each quad of lanes writes 16 contiguous bytes of a row
// per column tile), and the natural-log LSE from lane t == 0 of each quad. Rows past the
// sequence's Lq are not written; a row that saw no key writes zeros and LSE = -inf.
#pragma once

#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_softmax.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The LSE of the warp's rows g and g + 8 (lane 4g of each quad), rows past Lq skipped.
__device__ __forceinline__ void store_lse(const PrefillParams& p, const float (&lse)[2], int h,
                                          int q_begin, int warp_row, int Lq) {
  const int lane = threadIdx.x & 31;
  if (p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = warp_row + (lane >> 2) + 8 * hr;
    if (row < Lq) p.lse[static_cast<int64_t>(h) * p.lse_head_stride + q_begin + row] = lse[hr];
  }
}

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
  }
  store_lse(p, lse, h, q_begin, warp_row, Lq);
}

// The staged form (Tile::kSmemEpilogue): the warp's 16 rows go to its shared-memory stage by
// stmatrix (four 8x8 blocks an instruction: rows g / g + 8 of two 8-column tiles, the
// accumulator layout as it is), then back 16 bytes a lane, so each store instruction writes
// whole rows (two rows of 256 bytes at head_dim 128). `stage`: the warp's rows, each kRowBytes
// apart (padded: stmatrix's eight rows then hit distinct banks). Needs out and its token stride
// 16-byte aligned (PrefillSm90Params::out_vec16; store_output otherwise).
template <typename T, int D, int kRowBytes>
__device__ __forceinline__ void store_output_staged(const PrefillParams& p, float (&o)[D / 8][4],
                                                    RowSoftmax& softmax, int h, int q_begin,
                                                    int row0, int Lq, uint32_t stage) {
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  float inv_sum[2];
  float lse[2];
  softmax.finish(inv_sum, lse, p.scale);
  const int warp_row = row0 + warp * 16;
  // Lane l names row l % 8 of block l / 8: blocks (rows 0-7, tile 2j), (rows 8-15, 2j),
  // (rows 0-7, 2j + 1), (rows 8-15, 2j + 1).
  const int blk = lane >> 3;
  const uint32_t lane_addr =
      stage + ((lane & 7) + 8 * (blk & 1)) * kRowBytes + (blk >> 1) * 16;
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
    const uint32_t r0 = ptx::pack2<T>(o[2 * j][0] * inv_sum[0], o[2 * j][1] * inv_sum[0]);
    const uint32_t r1 = ptx::pack2<T>(o[2 * j][2] * inv_sum[1], o[2 * j][3] * inv_sum[1]);
    const uint32_t r2 = ptx::pack2<T>(o[2 * j + 1][0] * inv_sum[0], o[2 * j + 1][1] * inv_sum[0]);
    const uint32_t r3 = ptx::pack2<T>(o[2 * j + 1][2] * inv_sum[1], o[2 * j + 1][3] * inv_sum[1]);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     lane_addr + j * 32),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
  }
  __syncwarp();
  constexpr int kChunks = D / 8;  // 16-byte pieces of a row
#pragma unroll
  for (int k = 0; k < 16 * kChunks / 32; ++k) {
    const int i = lane + 32 * k;
    const int r = i / kChunks;
    const int c = i % kChunks;
    uint32_t v0, v1, v2, v3;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                 : "r"(stage + r * kRowBytes + c * 16));
    const int row = warp_row + r;
    if (row < Lq) {
      T* dst = static_cast<T*>(p.out) + static_cast<int64_t>(q_begin + row) * p.o_stride +
               static_cast<int64_t>(h) * D + c * 8;
      *reinterpret_cast<uint4*>(dst) = make_uint4(v0, v1, v2, v3);
    }
  }
  __syncwarp();  // the stage is this warp's again before its next tile writes it
  store_lse(p, lse, h, q_begin, warp_row, Lq);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
