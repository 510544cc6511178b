// The tile schedule of the Hopper prefill kernel. A work tile is (query head, sequence, block of
// kBlockM query rows). The (sequence, head) pairs, heads fastest, are cut into L2 sections of
// `section` pairs whose K/V fit in a share of the L2 (prefill_sm90_sections.h, sized on the
// host; the last section may be narrower). Tiles are numbered section by section; inside a section, pairs
// fastest, then row blocks from the last (the most causal key tiles) to the first. So the heavy
// tiles of a section come first, the heads of one GQA group run side by side, and every row
// block of a section reads K/V tiles the section's earlier row blocks left in L2 (without
// sections, a long batch re-read its K/V from DRAM once per row block: 2x the DRAM traffic of
// FlashAttention-3 at 8 x 2048, session 13's ncu). CTA i takes tiles i, i + G,
// i + 2G, ... (G = gridDim.x): with G = the tile count every CTA does one tile; with G = the SM
// count the grid is persistent and a CTA's producer loads the next tile while its consumers
// store the last one. Producer and consumers walk the same list and skip the same tiles, so their
// ring and Q counters stay in step.
// kMods (window, softcap, ALiBi; causal is the window's right bound 0): a tile visits only the
// key tiles [n_first, n_first + n_blocks) some of its rows can see (prefill_key_tiles, the ext
// kernel's rule), and keys [key_lo, key_hi) bound what any of its rows sees.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_sections.h"
#include "kernels/cuda/prefill_mask.cuh"
#include "kernels/cuda/prefill_params.h"

namespace kvattn::cuda::sm90 {

// The tile CTA `cta` of `ctas` runs in round `round` (may be >= the tile count in the last
// round: no tile).
__device__ __forceinline__ int64_t snake_tile(int64_t round, int cta, int ctas) {
  return round * ctas + ((round & 1) ? ctas - 1 - cta : cta);
}

struct PrefillTileWork {
  int h = 0;
  int b = 0;
  int q_begin = 0;
  int Lq = 0;
  int k_begin = 0;
  int Lk = 0;
  int m0 = 0;             // first query row of the tile within the sequence
  int causal_offset = 0;  // query i sees key j iff j < Lk and (causal) j <= i + causal_offset
  int n_blocks = 0;       // key tiles the tile reads (0: its rows see no key)
  // kMods only: the first key tile read, and the keys [key_lo, key_hi) some row of the tile
  // sees (the plain kernels read tiles 0 .. n_blocks - 1).
  int n_first = 0;
  int key_lo = 0;
  int key_hi = 0;
};

// A tile's decode in two phases, so that a caller can issue the next tile's length loads
// before the current tile's GEMMs and use them after (for_each_tile's kLookAhead):
// begin_tile: slot t -> (sequence, head, row block) and the four cu_seqlens loads into
// registers (their latency is not waited for here); finish_tile: the checks and the tile.
struct PendingTile {
  int h = 0;
  int b = 0;
  int z = 0;  // row block, counted from the last
  int q_begin = 0, q_end = 0, k_begin = 0, k_end = 0;
  bool valid = false;  // false: a padding slot (no tile)
};

// t must be < the schedule's slot count.
__device__ __forceinline__ PendingTile begin_tile(const PrefillParams& p, int64_t section,
                                                  int64_t section_unit, int64_t t,
                                                  bool narrow) {
  const int64_t pairs = static_cast<int64_t>(p.num_seqs) * p.num_heads;
  PendingTile pt;
  SectionTile st;
  if (narrow) {  // 32-bit arithmetic (section_tile_fits, checked per launch)
    st = section_tile_as<int32_t>(static_cast<int32_t>(t), static_cast<int32_t>(pairs),
                                  p.num_m_blocks, static_cast<int32_t>(section),
                                  static_cast<int32_t>(section_unit));
    if (!st.valid) return pt;
    const int pair = static_cast<int>(st.pair);
    pt.h = pair % p.num_heads;
    pt.b = pair / p.num_heads;
  } else {
    st = section_tile(t, pairs, p.num_m_blocks, section, section_unit);
    if (!st.valid) return pt;
    pt.h = static_cast<int>(st.pair % p.num_heads);
    pt.b = static_cast<int>(st.pair / p.num_heads);
  }
  pt.z = static_cast<int>(st.z);
  pt.valid = true;
  pt.q_begin = p.cu_seqlens_q[pt.b];
  pt.q_end = p.cu_seqlens_q[pt.b + 1];
  pt.k_begin = p.cu_seqlens_k[pt.b];
  pt.k_end = p.cu_seqlens_k[pt.b + 1];
  return pt;
}

// False when the tile is a padding slot, has no rows (m0 >= Lq) or its sequence's lengths are
// bad. Bad lengths are reported once per sequence (by the tile of head 0 and the first row
// block visited) when `report` is set (one thread of the CTA).
template <int kBlockM, int kBlockN, bool kCausal, bool kPaged, bool kMods = false>
__device__ __forceinline__ bool finish_tile(const PrefillParams& p, const PendingTile& pt,
                                            bool report, PrefillTileWork& w) {
  if (!pt.valid) return false;
  w.h = pt.h;
  w.b = pt.b;
  const int z = pt.z;
  report = report && w.h == 0 && z == 0;
  const int q_end = pt.q_end;
  const int k_end = pt.k_end;
  w.q_begin = pt.q_begin;
  w.k_begin = pt.k_begin;
  if (w.q_begin < 0 || q_end < w.q_begin || q_end > p.total_q || w.k_begin < 0 ||
      k_end < w.k_begin || (!kPaged && k_end > p.total_k)) {
    if (report) record_fault(p.fault_word, kFaultBadCuSeqlens);
    return false;
  }
  w.Lq = q_end - w.q_begin;
  w.Lk = k_end - w.k_begin;
  if constexpr (kPaged) {
    if (static_cast<int64_t>(w.Lk) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
      if (report) record_fault(p.fault_word, kFaultSeqlenOutOfRange);
      return false;
    }
  }
  w.m0 = (p.num_m_blocks - 1 - z) * kBlockM;
  if (w.m0 >= w.Lq) return false;
  w.causal_offset = w.Lk - w.Lq;
  if constexpr (kMods) {
    static_assert(!kCausal, "kMods: causal is the window's right bound 0");
    // The union of the rows' visible keys (prefill_key_tiles, as the ext kernel).
    const long long offset = w.causal_offset;
    const long long lo = key_lo(w.m0 + offset, p.window_left);
    const long long hi = key_hi(min(w.m0 + kBlockM, w.Lq) - 1 + offset, p.window_right, w.Lk);
    if (hi > lo) {
      w.key_lo = static_cast<int>(lo);
      w.key_hi = static_cast<int>(hi);
      w.n_first = w.key_lo / kBlockN;
      w.n_blocks = (w.key_hi + kBlockN - 1) / kBlockN - w.n_first;
    } else {
      w.key_lo = w.key_hi = w.n_first = w.n_blocks = 0;
    }
  } else {
    const int key_end = kCausal ? min(w.Lk, min(w.m0 + kBlockM, w.Lq) + w.causal_offset) : w.Lk;
    w.n_blocks = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
  }
  return true;
}

// Calls fn(w, kv_base, q_index) for each tile of this CTA that has rows, in the CTA's order;
// kv_base and q_index count the K/V ring slots and Q loads of the earlier tiles that read keys
// (what the producer and the consumers must agree on).
// kNarrow: decode in 32-bit arithmetic where section_tile_fits and sp.narrow_decode asks for it
// (the consumers, whose tile decode sits between two tiles' GEMMs); the producers, which run
// ahead and have 24-40 registers (both forms spilled at 32), keep the 64-bit form.
// kLookAhead (the consumers, Tile::kConsumerLookAhead: where they have the registers): the
// next tile's begin_tile (its cu_seqlens loads) is issued before fn runs the current one, so
// the loads' latency hides behind the current tile's GEMMs instead of sitting between one
// tile's epilogue and the next tile's first GEMM; 8 registers stay live across fn. (A
// producer-side handover of decoded tiles in shared memory, FlashAttention-3's order, does the
// same without them: prefill_sm90_tile_handover.cuh.)
template <int kBlockM, int kBlockN, bool kCausal, bool kPaged, bool kMods, bool kNarrow = false,
          bool kLookAhead = false, typename Fn>
__device__ __forceinline__ void for_each_tile(const PrefillSm90Params& sp, bool report,
                                              Fn&& fn) {
  const PrefillParams& p = sp.base;
  const int64_t num_tiles = sp.num_tiles;
  const bool narrow =
      kNarrow && sp.narrow_decode != 0 && section_tile_fits(num_tiles, sp.section_unit);
  uint32_t kv_base = 0;
  uint32_t q_index = 0;
  PrefillTileWork w;
  // The CTA's tile of round r, begun (no tile past the list's end).
  auto begin_round = [&](int64_t r) {
    const int64_t t = snake_tile(r, blockIdx.x, gridDim.x);
    return t < num_tiles ? begin_tile(p, sp.section, sp.section_unit, t, narrow) : PendingTile{};
  };
  PendingTile next;
  if constexpr (kLookAhead) next = begin_round(0);
  for (int64_t r = 0; r * gridDim.x < num_tiles; ++r) {
    PendingTile current;
    if constexpr (kLookAhead) {
      current = next;
      if ((r + 1) * gridDim.x < num_tiles) next = begin_round(r + 1);
    } else {
      current = begin_round(r);
    }
    if (!finish_tile<kBlockM, kBlockN, kCausal, kPaged, kMods>(p, current, report, w)) continue;
    fn(static_cast<const PrefillTileWork&>(w), kv_base, q_index);
    if (w.n_blocks > 0) {
      kv_base += w.n_blocks;
      ++q_index;
    }
  }
}

// The dynamic form of for_each_tile, for the producer's warp 0 of a handover tile (all its
// lanes; sp.tile_counter set): FlashAttention-3's dynamic persistent schedule. The CTA's first
// tile is slot blockIdx.x, each next one slot gridDim.x + the ticket an atomicAdd on the
// launch's counter returns, so a CTA takes the next slot when it frees up instead of every
// gridDim.x-th one: the static deal cannot absorb run-time variation (L2 hits, clocks), and its
// rounds leave CTAs a tile apart at the end. Slots keep the section order (sections unpadded:
// section_unit 1), heavy tiles first. The ticket for the next tile is claimed when the current
// one starts and read after fn has issued the current tile's loads, so its latency hides
// there. At most `max_tiles` tiles reach fn in a CTA (its handover ring): the CTA stops
// claiming when one more could not fit, so the launcher takes this form only where
// num_tiles <= gridDim.x * (max_tiles - 1) (then the grid's rings hold every tile). The
// last CTA to finish resets the counter pair for the next launch on it (launches on one pair
// never overlap: prefill_tile_counter). fn(w, kv_base, q_index) as for_each_tile's.
template <int kBlockM, int kBlockN, bool kCausal, bool kPaged, bool kMods, typename Fn>
__device__ __forceinline__ void for_each_claimed_tile(const PrefillSm90Params& sp, bool report,
                                                      uint32_t max_tiles, Fn&& fn) {
  const PrefillParams& p = sp.base;
  const bool lane0 = (threadIdx.x & 31) == 0;
  uint32_t kv_base = 0;
  uint32_t q_index = 0;
  uint32_t taken = 0;
  PrefillTileWork w;
  int64_t t = blockIdx.x;
  while (t < sp.num_tiles) {
    const bool claim = taken + 1 < max_tiles;  // room for this tile and one more
    uint32_t ticket = 0;
    if (claim && lane0) ticket = atomicAdd(sp.tile_counter, 1u);
    const PendingTile pt = begin_tile(p, sp.section, sp.section_unit, t, /*narrow=*/false);
    if (finish_tile<kBlockM, kBlockN, kCausal, kPaged, kMods>(p, pt, report, w)) {
      fn(static_cast<const PrefillTileWork&>(w), kv_base, q_index);
      ++taken;
      if (w.n_blocks > 0) {
        kv_base += w.n_blocks;
        ++q_index;
      }
    }
    ticket = __shfl_sync(0xffffffffu, ticket, 0);
    t = claim ? static_cast<int64_t>(gridDim.x) + ticket : sp.num_tiles;
  }
  if (lane0 && atomicAdd(sp.tile_counter + 1, 1u) == gridDim.x - 1) {
    // Every CTA has claimed its last ticket: zero the pair for the next launch.
    atomicExch(sp.tile_counter, 0u);
    atomicExch(sp.tile_counter + 1, 0u);
  }
  __syncwarp();
}

}  // namespace kvattn::cuda::sm90
