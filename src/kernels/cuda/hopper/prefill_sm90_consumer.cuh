// A consumer warpgroup of the Hopper prefill kernel: 64 query rows of one head against every
// key tile of the CTA, from the last tile to the first (so the tiles that need a mask, the
// causal diagonal and the ragged end of Lk, come first).
//
// Per tile: S = Q K^T as D/16 wgmma (Q and K both from shared memory) into 64 x kBlockN f32
// registers; the K stage is released; mask if needed; online softmax (prefill_softmax.cuh, on
// the same row/column layout as mma.sync: each warp owns 16 rows, a quad a row pair); P is
// packed to 16 bits straight from the S registers (the wgmma accumulator layout is the A
// register-fragment layout); O += P V as kBlockN/16 wgmma with P from registers and V from
// shared memory, transposed (V tiles are stored [key][head_dim], i.e. N-contiguous).
// The two consumer warpgroups run the same loop on different rows; the scheduler interleaves
// one's softmax with the other's GEMMs.
#pragma once

#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"
#include "kernels/cuda/hopper/wgmma_ops.cuh"
#include "kernels/cuda/prefill_softmax.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <typename T, class Tile, bool kCausal>
struct PrefillConsumer {
  static constexpr int D = Tile::kHeadDim;
  static constexpr int BN = Tile::kBlockN;
  static constexpr int kNT = BN / 8;
  static constexpr int kDT = D / 8;

  float o[1][kDT][4];
  OnlineSoftmax<1> softmax;

  // wg: this consumer warpgroup (0 or 1); row0: its first query row within the sequence.
  __device__ __forceinline__ void run(const PrefillSm90Params& p, const PrefillSmem<Tile>& s,
                                      int wg, int row0, int Lk, int causal_offset, int n_blocks) {
    const int lane = threadIdx.x & 31;
    const int warp = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.0f;
    }
    softmax.init();
    if (n_blocks == 0) return;
    mbar_wait(s.q_full, 0);
    const uint32_t q_rows = s.q + wg * 64 * 128;  // this warpgroup's rows of column block 0
    for (int it = 0; it < n_blocks; ++it) {
      const int n = n_blocks - 1 - it;
      const int stage = it % Tile::kStages;
      const uint32_t parity = static_cast<uint32_t>(it / Tile::kStages) & 1;

      // S = Q K^T
      float sc[1][kNT][4];
      mbar_wait(s.k_full(stage), parity);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t col = (kk % 4) * 32;  // 16 elements = 32 bytes per K step
        const uint64_t a = smem_desc_sw128(q_rows + (kk / 4) * Tile::kBlockM * 128 + col, 16);
        const uint64_t b = smem_desc_sw128(s.k(stage) + (kk / 4) * BN * 128 + col, 16);
        wgmma_ss<T, BN>(sc[0], a, b, kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(sc[0]);
      if (lane == 0) mbar_arrive(s.k_empty(stage));

      const int warp_row = row0 + warp * 16;
      const bool need_mask =
          (n + 1) * BN > Lk || (kCausal && (n + 1) * BN - 1 > row0 + causal_offset);
      if (need_mask) {
        apply_mask<kCausal>(sc, warp_row + (lane >> 2), n * BN + 2 * (lane & 3), Lk,
                            causal_offset);
      }
      softmax.update(sc, o, p.base.scale_log2);

      uint32_t pa[BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        pa[kk][0] = ptx::pack2<T>(sc[0][2 * kk][0], sc[0][2 * kk][1]);
        pa[kk][1] = ptx::pack2<T>(sc[0][2 * kk][2], sc[0][2 * kk][3]);
        pa[kk][2] = ptx::pack2<T>(sc[0][2 * kk + 1][0], sc[0][2 * kk + 1][1]);
        pa[kk][3] = ptx::pack2<T>(sc[0][2 * kk + 1][2], sc[0][2 * kk + 1][3]);
      }

      // O += P V
      mbar_wait(s.v_full(stage), parity);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint64_t b = smem_desc_sw128(s.v(stage) + kk * 16 * 128, BN * 128);
        wgmma_rs<T, D>(o[0], pa[kk], b, 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(o[0]);
      if (lane == 0) mbar_arrive(s.v_empty(stage));
    }
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
