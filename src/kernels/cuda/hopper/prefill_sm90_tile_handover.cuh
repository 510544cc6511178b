// Tile::kProducerDecode: the producer's warp 0 decodes the CTA's tiles (prefill_sm90_schedule.cuh)
// and hands each one to the consumers in shared memory (PrefillSmem::work(n)) together with its
// Q, so the consumers never decode: their path from one tile's epilogue to the next tile's first
// GEMM loses the cu_seqlens loads and the section arithmetic (FlashAttention-3's producer-side
// scheduler does the same).
// Transport: the async proxy, as Q's. Lane 0 writes the tile to its SM's slot in global memory
// (prefill_handover_slots: one 64-byte slot per SM id; an sm_90 CTA of these tiles takes more
// than half an SM's shared memory, so no two share an SM), orders it before the async proxy
// (fence.proxy.async.global) and bulk-loads it into the CTA's n-th work(n) slot on q_full,
// whose transaction bytes then cover the tile and its Q. The slots are a ring of one slot a
// handed tile; the launch takes the handover only where the CTA's tiles and the end sentinel
// fit it (prefill_sm90_launch.cuh), so no slot is written twice in a CTA. (A build with
// -DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1 hands over in every kernel: there a CTA with more
// tiles than slots reuses them, which reads right but racecheck flags.)
// Why so (compute-sanitizer's model, bench/micro/mbar_handoff_race.cu, H200 sessions 17 and
// 22): racecheck takes an mbarrier wait as ordering a read after an async-proxy write that
// completed on it (bulk load or st.async), but not a one-sided arrival (q_empty) as ordering a
// read before the next write of the same bytes, whoever writes them: plain stores to one slot
// were flagged, a bulk load into one reused slot too (session 22, 1 hazard in the probe,
// hundreds in the suite), a ring with no reuse is clean. The hardware reads right in every
// form (the memory model orders them). st.async passed racecheck but memcheck rejects it into
// the CTA's own memory.
// Protocol (over q_full / q_empty, one phase per handed tile, in the CTA's tile order):
//   producer warp 0: waits q_empty of the previous tile (so the previous bulk load has landed
//     and the consumers have read it); lane 0 writes the slot, arms q_full with the tile's
//     bytes (and Q's, for a tile with keys) and issues the bulk load (and the Q boxes); after
//     the last tile, the same with the end sentinel (n_blocks < 0).
//   consumers: wait q_full, read the tile; a tile with keys releases q_empty after its last
//     S = Q K^T (PrefillConsumer::run, as without the handover), one without keys right after
//     the read (one arrival per consumer warp).
// The ring counters follow from the handed tiles: kv_base sums their n_blocks; q_index counts
// all of them (the q_full parity).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_schedule.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

static_assert(sizeof(PrefillTileWork) == 48 && sizeof(PrefillTileWork) <= kPrefillHandoverSlotBytes,
              "three 16-byte words in a global slot and in a PrefillSmem::work() slot");

// Lane 0 of the producer: tile w, the n-th handed, from this SM's global slot into work(n),
// completing on q_full with `q_bytes` more of Q (0: no Q).
template <class Tile>
__device__ __forceinline__ void hand_over(const PrefillSm90Params& sp, const PrefillSmem<Tile>& s,
                                          const PrefillTileWork& w, uint32_t n, uint32_t q_bytes) {
  static_assert(Tile::kHandoverSlotBytes == sizeof(PrefillTileWork));
  static_assert(2 * Tile::kSmemAlloc > 228 * 1024, "one CTA an SM: a slot per SM id");
  int4* slot = static_cast<int4*>(sp.handover_slots) +
               (sm_id() % kPrefillHandoverSlots) * (kPrefillHandoverSlotBytes / 16);
  int v[12];
  memcpy(v, &w, sizeof(v));
  fence_proxy_async_global();  // the previous tile's bulk load (landed: q_empty) before these
#pragma unroll
  for (int i = 0; i < 3; ++i) slot[i] = make_int4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  fence_proxy_async_global();  // these stores before the bulk load
  mbar_arrive_expect_tx(s.q_full, sizeof(PrefillTileWork) + q_bytes);
  bulk_load(s.work(n), slot, sizeof(PrefillTileWork), s.q_full);
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
// the static deal's or, with sp.tile_counter, the ones it claims (for_each_claimed_tile),
// hands each over with its Q, and calls load_kv(w, kv_base, q_index) for its K/V loads (which
// must not load Q again); then hands over the end sentinel.
template <class Tile, bool kCausal, bool kPaged, bool kMods, typename LoadKV>
__device__ __forceinline__ void hand_over_tiles(const PrefillSm90Params& sp,
                                                const PrefillSmem<Tile>& s, LoadKV&& load_kv) {
  const bool lane0 = (threadIdx.x & 31) == 0;
  uint32_t handed = 0;
  auto hand = [&](const PrefillTileWork& w, uint32_t kv_base, uint32_t q_index) {
    if (handed > 0) mbar_wait(s.q_empty(), (handed - 1) & 1);
    if (lane0) {
      hand_over(sp, s, w, handed, w.n_blocks > 0 ? Tile::kQBytes : 0);
      if (w.n_blocks > 0) issue_q_boxes(sp, s, w.q_begin + w.m0, w.h);
    }
    __syncwarp();
    ++handed;
    if (w.n_blocks > 0) load_kv(w, kv_base, q_index);
  };
  if (sp.tile_counter != nullptr) {  // tiles claimed as the CTA frees up; the ring's last slot
                                     // is the end sentinel's
    for_each_claimed_tile<Tile::kBlockM, Tile::kBlockN, kCausal, kPaged, kMods>(
        sp, /*report=*/threadIdx.x == 0, Tile::kHandoverSlots - 1, hand);
  } else {
    for_each_tile<Tile::kBlockM, Tile::kBlockN, kCausal, kPaged, kMods>(
        sp, /*report=*/threadIdx.x == 0, hand);
  }
  if (handed > 0) mbar_wait(s.q_empty(), (handed - 1) & 1);
  if (lane0) {
    PrefillTileWork end;
    end.n_blocks = -1;
    hand_over(sp, s, end, handed, 0);
  }
}

// The consumers (every thread of every consumer warpgroup): fn(w, kv_base, q_index) for each
// handed tile, in order; q_index is the tile's q_full phase (PrefillConsumer::run's).
template <class Tile, typename Fn>
__device__ __forceinline__ void for_each_handed_tile(const PrefillSmem<Tile>& s, Fn&& fn) {
  uint32_t kv_base = 0;
  for (uint32_t handed = 0;; ++handed) {
    mbar_wait(s.q_full, handed & 1);
    const PrefillTileWork w = load_work(s.work(handed));
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
