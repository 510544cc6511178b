// Tile::kProducerDecode: the producer's warp 0 decodes the CTA's tiles (prefill_sm90_schedule.cuh)
// and hands each one to the consumers in shared memory (PrefillSmem::work()) together with its
// Q, so the consumers never decode: their path from one tile's epilogue to the next tile's first
// GEMM loses the cu_seqlens loads and the section arithmetic (FlashAttention-3's producer-side
// scheduler does the same).
// Protocol (over q_full / q_empty, one phase per handed tile, in the CTA's tile order):
//   producer warp 0: waits q_empty of the previous tile; lane 0 arms q_full with the tile's 48
//     bytes (plus the Q bytes for a tile with keys: the Q TMA follows; a tile whose rows see no
//     key has no Q) and writes the tile with st.async, whose bytes complete on q_full as the Q
//     TMA's do; after the last tile, the same with the end sentinel (n_blocks < 0).
//   The slot is written only by asynchronous stores bound to q_full, never by plain stores
//   ordered by the barrier's arrival alone: compute-sanitizer's racecheck does not take a
//   one-sided arrival (mbarrier arrive, or bar.arrive) as ordering plain shared-memory accesses
//   and reported 197 hazards on the plain-store form (session 16); on the H200 its own probe
//   (bench/micro/mbar_handoff_race.cu, session 17) flags the plain-store handoff under
//   mbarriers and under named barriers alike, and neither st.async nor __syncthreads. st.async
//   writes through the cluster window, so these kernels launch as one-CTA clusters
//   (prefill_sm90_launch.cuh; without a cluster launch it is an illegal instruction).
//   consumers: wait q_full, read the tile; a tile with keys releases q_empty after its last
//     S = Q K^T (PrefillConsumer::run, as without the handover), one without keys right after
//     the read (one arrival per consumer warp).
// The ring counters follow from the handed tiles: kv_base sums their n_blocks; q_index counts
// all of them (the q_full parity).
#pragma once

#include <cstdint>

#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_schedule.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

static_assert(sizeof(PrefillTileWork) == 48, "three 16-byte words in PrefillSmem::work()");

constexpr uint32_t kWorkTx = sizeof(PrefillTileWork);  // the bytes st.async completes on q_full

// The tile into the slot: three asynchronous 16-byte stores completing on `bar` (armed for
// kWorkTx bytes by the caller).
__device__ __forceinline__ void store_work(uint32_t addr, const PrefillTileWork& w, uint32_t bar) {
  const uint32_t* v = reinterpret_cast<const uint32_t*>(&w);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    st_async_v4(addr + 16 * i, v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3], bar);
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
          if (w.n_blocks > 0) {
            issue_q(sp, s, w.q_begin + w.m0, w.h, kWorkTx);
          } else {
            mbar_arrive_expect_tx(s.q_full, kWorkTx);
          }
          store_work(s.work(), w, s.q_full);
        }
        __syncwarp();
        ++handed;
        if (w.n_blocks > 0) load_kv(w, kv_base, q_index);
      });
  if (handed > 0) mbar_wait(s.q_empty(), (handed - 1) & 1);
  if (lane0) {
    PrefillTileWork end;
    end.n_blocks = -1;
    mbar_arrive_expect_tx(s.q_full, kWorkTx);
    store_work(s.work(), end, s.q_full);
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
