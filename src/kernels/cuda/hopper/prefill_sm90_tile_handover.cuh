// Tile::kProducerDecode: the producer's warp 0 decodes the CTA's tiles (prefill_sm90_schedule.cuh)
// and hands each one to the consumers in shared memory (PrefillSmem::work()) together with its
// Q, so the consumers never decode: their path from one tile's epilogue to the next tile's first
// GEMM loses the cu_seqlens loads and the section arithmetic (FlashAttention-3's producer-side
// scheduler does the same).
// Protocol (over q_full / q_empty, one phase per handed tile, in the CTA's tile order):
//   producer warp 0: waits q_empty of the previous tile; lane 0 writes the tile, then arrives
//     on q_full with the Q bytes (a tile with keys: the Q TMA follows) or plainly (a tile whose
//     rows see no key: no Q); after the last tile, the same with the end sentinel (n_blocks < 0).
//   consumers: wait q_full, read the tile; a tile with keys releases q_empty after its last
//     S = Q K^T (PrefillConsumer::run, as without the handover), one without keys right after
//     the read (one arrival per consumer warp).
// The ring counters follow from the handed tiles: kv_base sums their n_blocks; q_index counts
// all of them (the q_full parity).
// Sanitizers (H200): memcheck 0 (session 16); racecheck reports the slot's plain stores and
// loads as hazards because it does not take a one-sided arrival as ordering: its own probe
// (bench/micro/mbar_handoff_race.cu) flags the same handoff ordered by mbarriers and by named
// barriers (bar.arrive / bar.sync) alike, and reads right every time (session 17). The form it
// passed, the slot written by st.async completing on q_full (one-CTA cluster launches), is
// invalid under memcheck ("Cluster needs to have at least 2 blocks"): st.async is for another
// CTA's shared memory. So the handover stays off by default (CudaTuning::prefill_sm90_handover)
// until a protocol is clean under both.
#pragma once

#include <cstdint>

#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_schedule.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

static_assert(sizeof(PrefillTileWork) == 48, "three 16-byte words in PrefillSmem::work()");

__device__ __forceinline__ void store_work(uint32_t addr, const PrefillTileWork& w) {
  const int* v = reinterpret_cast<const int*>(&w);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr + 16 * i),
                 "r"(v[4 * i]), "r"(v[4 * i + 1]), "r"(v[4 * i + 2]), "r"(v[4 * i + 3])
                 : "memory");
  }
}

__device__ __forceinline__ PrefillTileWork load_work(uint32_t addr) {
  PrefillTileWork w;
  int* v = reinterpret_cast<int*>(&w);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[4 * i]), "=r"(v[4 * i + 1]), "=r"(v[4 * i + 2]), "=r"(v[4 * i + 3])
                 : "r"(addr + 16 * i)
                 : "memory");
  }
  return w;
}

// The producer's warp 0 (all its lanes): decodes every tile of this CTA (reporting bad lengths),
// hands each over with its Q, and calls load_kv(w, kv_base, q_index) for its K/V loads (which
// must not load Q again); then hands over the end sentinel.
template <class Tile, bool kCausal, bool kPaged, bool kMods, typename LoadKV>
__device__ __forceinline__ void hand_over_tiles(const PrefillSm90Params& sp,
                                                const PrefillSmem<Tile>& s, LoadKV&& load_kv) {
  const bool lane0 = (threadIdx.x & 31) == 0;
  uint32_t handed = 0;
  for_each_tile<Tile::kBlockM, Tile::kBlockN, kCausal, kPaged, kMods>(
      sp, /*report=*/threadIdx.x == 0,
      [&](const PrefillTileWork& w, uint32_t kv_base, uint32_t q_index) {
        if (handed > 0) mbar_wait(s.q_empty(), (handed - 1) & 1);
        if (lane0) {
          store_work(s.work(), w);
          if (w.n_blocks > 0) {
            issue_q(sp, s, w.q_begin + w.m0, w.h);
          } else {
            mbar_arrive(s.q_full);
          }
        }
        __syncwarp();
        ++handed;
        if (w.n_blocks > 0) load_kv(w, kv_base, q_index);
      });
  if (handed > 0) mbar_wait(s.q_empty(), (handed - 1) & 1);
  if (lane0) {
    PrefillTileWork end;
    end.n_blocks = -1;
    store_work(s.work(), end);
    mbar_arrive(s.q_full);
  }
}

// The consumers (every thread of every consumer warpgroup): fn(w, kv_base, q_index) for each
// handed tile, in order; q_index is the tile's q_full phase (PrefillConsumer::run's).
template <class Tile, typename Fn>
__device__ __forceinline__ void for_each_handed_tile(const PrefillSmem<Tile>& s, Fn&& fn) {
  uint32_t kv_base = 0;
  for (uint32_t handed = 0;; ++handed) {
    mbar_wait(s.q_full, handed & 1);
    const PrefillTileWork w = load_work(s.work());
    if (w.n_blocks < 0) return;
    if (w.n_blocks == 0) {  // no Q, no keys: release the handover now
      __syncwarp();
      if ((threadIdx.x & 31) == 0) mbar_arrive(s.q_empty());
    }
    fn(w, kv_base, handed);
    kv_base += static_cast<uint32_t>(w.n_blocks);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
