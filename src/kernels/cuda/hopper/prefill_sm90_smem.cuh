// Shared-memory addresses of the Hopper prefill kernel (layout: Sm90PrefillTile), and the
// mbarrier protocol over them:
//   q_full        1 arrival (the producer's expect_tx) + the Q bytes, once per tile the CTA runs
//   q_empty       one arrival per consumer warp once its last S = Q K^T of the tile completed
//   k_full[s]     1 arrival + one K tile's bytes (TMA), or 128 arrivals (cp.async gather), per
//                 round of the ring; consumers wait
//   k_empty[s]    one arrival per consumer warp (8) once its S = Q K^T read the stage; producer
//   v_full/v_empty[s]  the same for V, released after O += P V.
// With Tile::kProducerDecode, q_full / q_empty also guard the handed-over tile (work(n)): one
// phase per tile with rows, keys or not (q_full's bytes: the tile's, plus Q's for a tile with
// keys), and one last phase for the end sentinel (prefill_sm90_tile_handover.cuh).
#pragma once

#include <cstdint>

#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda::sm90 {

template <class Tile>
struct PrefillSmem {
  static constexpr uint32_t kConsumerWarps = 4 * Tile::kConsumerWarpgroups;
  static_assert(Tile::kNumBarriers == 2 + 4 * Tile::kStages);
  uint32_t q;     // Q tile
  uint32_t kv;    // K stages, then V stages
  uint32_t bars;  // mbarriers
  uint32_t q_full;

  __device__ __forceinline__ explicit PrefillSmem(uint32_t base)
      : q(base),
        kv(base + Tile::kQBytes),
        bars(base + Tile::kQBytes + 2 * Tile::kStages * Tile::kKVBytes),
        q_full(bars) {}

  __device__ __forceinline__ uint32_t k(int stage) const { return kv + stage * Tile::kKVBytes; }
  __device__ __forceinline__ uint32_t v(int stage) const {
    return kv + (Tile::kStages + stage) * Tile::kKVBytes;
  }
  __device__ __forceinline__ uint32_t bar(int i) const { return bars + 8 * i; }
  __device__ __forceinline__ uint32_t q_empty() const { return bar(1); }
  __device__ __forceinline__ uint32_t k_full(int st) const { return bar(2 + st); }
  __device__ __forceinline__ uint32_t k_empty(int st) const { return bar(2 + Tile::kStages + st); }
  __device__ __forceinline__ uint32_t v_full(int st) const { return bar(2 + 2 * Tile::kStages + st); }
  __device__ __forceinline__ uint32_t v_empty(int st) const {
    return bar(2 + 3 * Tile::kStages + st);
  }
  // The staged epilogue's rows of consumer warp w (0 .. 4 kConsumerWarpgroups - 1).
  __device__ __forceinline__ uint32_t o_stage(int w) const {
    return bars + Tile::kNumBarriers * 8 + w * 16 * Tile::kOStageRowBytes;
  }
  // The slot of the n-th tile the producer hands over (Tile::kProducerDecode; a ring of
  // Tile::kHandoverSlots 48-byte slots, 16-byte aligned).
  __device__ __forceinline__ uint32_t work(uint32_t n) const {
    return bars + Tile::kNumBarriers * 8 + Tile::kOStageBytes +
           (n % Tile::kHandoverSlots) * Tile::kHandoverSlotBytes;
  }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // One thread, before the CTA-wide barrier that precedes any use. A full barrier completes on
  // the producer's one expect_tx arrival plus the TMA bytes, or (gather) on 128 arrivals.
  __device__ __forceinline__ void init_barriers(bool gather) const {
    const uint32_t full_arrivals = gather ? 128 : 1;
    mbar_init(q_full, 1);
    mbar_init(q_empty(), kConsumerWarps);
    for (int st = 0; st < Tile::kStages; ++st) {
      mbar_init(k_full(st), full_arrivals);
      mbar_init(v_full(st), full_arrivals);
      mbar_init(k_empty(st), kConsumerWarps);
      mbar_init(v_empty(st), kConsumerWarps);
    }
    fence_barrier_init();
  }
#endif
};

}  // namespace kvattn::cuda::sm90
