// The launcher template of the Hopper prefill kernel (instantiated by prefill_sm90_inst_*.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_kernel.cuh"
#include "kernels/cuda/hopper/prefill_sm90_launch.h"
#include "kernels/cuda/hopper/tensor_map.h"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/smem_limit.h"
#include "kernels/cuda/tuning.h"
#include "kvattn/core/error.h"

namespace kvattn::cuda {

// The keys of the longest sequence: the hint, else what the tensors bound.
inline int64_t prefill_sm90_kv_len(const PrefillParams& p, bool paged) {
  if (p.max_seqlen_k > 0) return p.max_seqlen_k;
  return paged ? static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size
               : (static_cast<int64_t>(p.total_k) + p.num_seqs - 1) / p.num_seqs;
}

// CudaTuning::prefill_sm90_handover = 2: the plain kernels take the tile handover where a
// tile's key loop is short on average: a query row of the longest sequence sees at most this
// many keys on average (causal: kv_len - Lq / 2, bottom-right; else kv_len). What the handover
// removes is a fixed cost per tile (the consumers' tile decode between two tiles' GEMMs): H200,
// session 22 call 5, same binary: 16x1024 d128 (512 keys a row) -2.5-3.5%, 8x2048 32/8 d64
// (1024) -3.6-4.4%, 4x4096 9/3 d64 (2048) -3-4%, 8x2048 32/8 d128 (1024) even; the prefix
// 8 x 512 over 4096 keys (3840) +1-3% and 1x16384 (8192) +1.5%, so not there.
inline constexpr int64_t kSm90HandoverMaxRowKeys = 2048;

// A launch's tile schedule (prefill_sm90_schedule.cuh): (sequence, head) pairs per L2 section,
// each section's slots padded to a multiple of section_unit, the slots in all, and the grid.
struct Sm90Schedule {
  int64_t section = 1;
  int64_t section_unit = 1;
  int64_t num_tiles = 0;
  int64_t grid = 0;
};

// p.num_m_blocks must be Tile's (rows of p.max_seqlen_q in kBlockM blocks). claimed: for the
// dynamic schedule (for_each_claimed_tile), whose sections need no padding.
template <class Tile>
Sm90Schedule prefill_sm90_schedule(const PrefillParams& p, bool paged, int device,
                                   bool claimed = false) {
  Sm90Schedule sc;
  const int64_t pairs = static_cast<int64_t>(p.num_heads) * p.num_seqs;
  const int64_t tiles = pairs * p.num_m_blocks;
  const int64_t kv_len = prefill_sm90_kv_len(p, paged);
  sc.section = sm90::prefill_l2_section(p.num_seqs, p.num_heads, p.group, Tile::kHeadDim, kv_len,
                                        /*elem_bytes=*/2,
                                        int64_t{cuda_tuning().prefill_sm90_l2_mb} << 20);
  sc.grid = tiles;
  if (cuda_tuning().prefill_sm90_persistent != 0 || sc.grid > INT32_MAX) {
    sc.grid = std::min<int64_t>(sc.grid, sm_count(device));
  }
  // A persistent grid deals the slots round robin: pad each section to whole rounds (one
  // section needs no padding); one CTA per tile takes the tiles as they come.
  sc.section_unit = !claimed && sc.grid < tiles && sc.section < pairs ? sc.grid : 1;
  sc.num_tiles = sm90::total_section_slots(pairs, p.num_m_blocks, sc.section, sc.section_unit);
  return sc;
}

// How a launch's producer issues K/V (see PrefillSm90Params): kv_gather (the experimental
// cp.async gather of pages that are not whole tiles) and kv_producer_warps (1..4 warps issuing
// a tile's page pieces).
struct Sm90ProducerShape {
  int gather = 0;
  int warps = 1;
};
template <class Tile, bool kPaged, bool kMods>
Sm90ProducerShape prefill_sm90_producer_shape(const PrefillParams& p) {
  Sm90ProducerShape ps;
  if constexpr (kPaged) {
    const int rows = std::gcd(p.block_size, Tile::kBlockN);
    // Pages that are not whole tiles: gathered by cp.async when switched on (experimental).
    // Not with kMods or head_dim 256 (prefill_sm90_eligible sends those pages to sm_80).
    // (Nor with Tile::kProducerDecode: the gathering warps do not hand tiles over.)
    ps.gather = !kMods && !Tile::kProducerDecode && Tile::kBlockN == 128 &&
                cuda_tuning().prefill_sm90_paged_gather != 0 &&
                p.block_size % Tile::kBlockN != 0;
    // Several producer warps only where a tile has several page pieces to issue (and the
    // producer the registers: Tile::kMultiWarpProducer).
    ps.warps = Tile::kMultiWarpProducer && ps.gather == 0 && Tile::kBlockN / rows > 1
                   ? std::clamp(cuda_tuning().prefill_sm90_producer_warps, 1, 4)
                   : 1;
  }
  return ps;
}

// Whether a launch with tile `Tile` takes its handover form: `mode` as
// CudaTuning::prefill_sm90_handover (0 never, 1 always, 2 where a query row sees at most
// kSm90HandoverMaxRowKeys keys on average: `row_keys`), and only where each CTA's tiles and
// the end sentinel fit the handover's slot ring (no slot written twice:
// prefill_sm90_tile_handover.cuh).
// CudaTuning::prefill_sm90_dynamic also takes it, whatever `mode` and the key loops say, where
// the launch would then claim its tiles (sm90::prefill_sm90_claims_tiles): at 2, and at 1 for
// the window / softcap / ALiBi kernels (kMods; tuning.h has the measurements).
template <class Tile, bool kPaged, bool kMods>
bool use_tile_handover(const PrefillParams& base, int device, int mode, int64_t row_keys) {
  // The experimental cp.async gather (pages that are not whole tiles) has no handover form.
  if (kPaged && cuda_tuning().prefill_sm90_paged_gather != 0 && Tile::kBlockN == 128 &&
      base.block_size % Tile::kBlockN != 0) {
    return false;
  }
  PrefillParams p = base;
  p.num_m_blocks = (p.max_seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM;
  if (p.num_m_blocks == 0 || p.num_seqs == 0) return false;
  using Handover = Sm90WithTileHandover<Tile>;
  const int dynamic = cuda_tuning().prefill_sm90_dynamic;
  if (dynamic == 2 || (dynamic == 1 && kMods)) {
    const Sm90Schedule dyn = prefill_sm90_schedule<Handover>(p, kPaged, device, true);
    if (sm90::prefill_sm90_claims_tiles(
            dynamic, prefill_sm90_producer_shape<Handover, kPaged, kMods>(p).warps, p.total_q,
            p.num_seqs, p.num_m_blocks, Handover::kBlockM, dyn.num_tiles, dyn.grid,
            Handover::kHandoverSlots, cuda_tuning().prefill_sm90_dynamic_min_rounds)) {
      return true;
    }
  }
  if (mode == 0) return false;
  if (mode == 2 && row_keys > kSm90HandoverMaxRowKeys) return false;
  const Sm90Schedule sc = prefill_sm90_schedule<Tile>(p, kPaged, device);
  const int64_t rounds = (sc.num_tiles + sc.grid - 1) / sc.grid;
  return rounds + 1 <= Handover::kHandoverSlots;
}

// The keys a query row of the longest sequence sees on average, bounded by the window
// (bottom-right aligned; window_right 0 is causal): what mode 2 weighs.
inline int64_t prefill_sm90_row_keys(const PrefillParams& p, bool causal, bool paged) {
  const int64_t kv_len = prefill_sm90_kv_len(p, paged);
  const bool right0 = causal || p.window_right == 0;
  int64_t keys = right0 ? kv_len - std::min<int64_t>(p.max_seqlen_q, kv_len) / 2 : kv_len;
  if (p.window_left >= 0) {
    keys = std::min<int64_t>(keys, int64_t{p.window_left} + 1 + std::max(p.window_right, 0));
  }
  return keys;
}

// Launches one tile configuration (Sm90PrefillTileConfig) on the current device; kMods: the
// window / softcap / ALiBi form (kCausal false: causal is p.window_right = 0).
template <typename T, class Tile, bool kCausal, bool kPaged, bool kMods = false>
void launch_prefill_sm90_tile(const PrefillParams& base, cudaStream_t stream) {
  constexpr uint64_t D = Tile::kHeadDim;
  constexpr uint64_t kElem = 2;
  PrefillSm90Params sp;
  sp.base = base;
  PrefillParams& p = sp.base;
  p.num_m_blocks = (p.max_seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM;
  if (p.num_m_blocks == 0 || p.num_seqs == 0) return;
  const uint64_t heads = static_cast<uint64_t>(p.num_heads);
  const uint64_t kv_heads = static_cast<uint64_t>(p.num_heads / p.group);
  sp.tmap_q = make_tensor_map_2byte("q", p.q, {D, heads, static_cast<uint64_t>(p.total_q)},
                                    {D * kElem, static_cast<uint64_t>(p.q_stride) * kElem},
                                    {64, 1, Tile::kBlockM});
  const Sm90ProducerShape producer = prefill_sm90_producer_shape<Tile, kPaged, kMods>(p);
  sp.kv_gather = producer.gather;
  sp.kv_producer_warps = producer.warps;
  if constexpr (kPaged) {
    // Boxes of gcd(block_size, kBlockN) keys: key tiles and pages both split into whole
    // boxes, so a box lies in one page (prefill_sm90_eligible: a multiple of 8).
    const int rows = std::gcd(p.block_size, Tile::kBlockN);
    sp.kv_box_rows = rows;
    const uint64_t bs = static_cast<uint64_t>(p.block_size);
    const uint64_t nb = static_cast<uint64_t>(std::max(p.num_blocks, 1));
    const uint32_t box_rows = static_cast<uint32_t>(rows);
    sp.tmap_k = make_tensor_map_2byte(
        "k_cache", p.k, {D, kv_heads, bs, nb},
        {D * kElem, static_cast<uint64_t>(p.k_stride) * kElem,
         static_cast<uint64_t>(p.k_block_stride) * kElem},
        {64, 1, box_rows, 1});
    sp.tmap_v = make_tensor_map_2byte(
        "v_cache", p.v, {D, kv_heads, bs, nb},
        {D * kElem, static_cast<uint64_t>(p.v_stride) * kElem,
         static_cast<uint64_t>(p.v_block_stride) * kElem},
        {64, 1, box_rows, 1});
  } else {
    sp.kv_box_rows = Tile::kBlockN;
    const uint64_t rows = static_cast<uint64_t>(std::max(p.total_k, 1));
    sp.tmap_k = make_tensor_map_2byte("k", p.k, {D, kv_heads, rows},
                                      {D * kElem, static_cast<uint64_t>(p.k_stride) * kElem},
                                      {64, 1, Tile::kBlockN});
    sp.tmap_v = make_tensor_map_2byte("v", p.v, {D, kv_heads, rows},
                                      {D * kElem, static_cast<uint64_t>(p.v_stride) * kElem},
                                      {64, 1, Tile::kBlockN});
  }

  auto kernel = prefill_sm90_kernel<T, Tile, kCausal, kPaged, kMods>;
  constexpr int kSmem = Tile::kSmemAlloc;
  static std::atomic<uint64_t> raised{0};
  const int device = raise_smem_limit_once(kernel, kSmem, raised, "prefill_attention");
  Sm90Schedule sc = prefill_sm90_schedule<Tile>(p, kPaged, device);
  if constexpr (Tile::kProducerDecode) {
    sp.handover_slots = prefill_handover_slots(device);
    const int dynamic = cuda_tuning().prefill_sm90_dynamic;
    const Sm90Schedule claimed =
        dynamic != 0 ? prefill_sm90_schedule<Tile>(p, kPaged, device, true) : sc;
    if (sm90::prefill_sm90_claims_tiles(dynamic, sp.kv_producer_warps, p.total_q, p.num_seqs,
                                        p.num_m_blocks, Tile::kBlockM, claimed.num_tiles,
                                        claimed.grid, Tile::kHandoverSlots,
                                        cuda_tuning().prefill_sm90_dynamic_min_rounds)) {
      sp.tile_counter = prefill_tile_counter(device, stream);  // null: none left, static
      if (sp.tile_counter != nullptr) sc = claimed;
    }
  }
  sp.section = sc.section;
  sp.section_unit = sc.section_unit;
  sp.num_tiles = sc.num_tiles;
  const int64_t grid = sc.grid;
  sp.turns_across_tiles = cuda_tuning().prefill_sm90_turns != 0 ? 1 : 0;
  sp.out_vec16 = reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.o_stride % 8 == 0 ? 1 : 0;
  sp.narrow_decode = cuda_tuning().prefill_sm90_narrow_decode != 0 ? 1 : 0;
  kernel<<<static_cast<unsigned>(grid), Tile::kThreads, kSmem, stream>>>(sp);
  const cudaError_t err = cudaGetLastError();
  KVATTN_CHECK(err == cudaSuccess, "prefill_attention: sm90 kernel launch failed: ",
               cudaGetErrorString(err));
}

// Launches Tile, in its handover form where use_tile_handover says so for `mode` (kMods: the
// window / softcap / ALiBi form, kCausal false).
template <typename T, class Tile, bool kCausal, bool kPaged, bool kMods>
void launch_prefill_sm90_tile_choosing_handover(const PrefillParams& p, cudaStream_t stream,
                                                int mode) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (use_tile_handover<Tile, kPaged, kMods>(p, device, mode,
                                             prefill_sm90_row_keys(p, kCausal, kPaged))) {
    launch_prefill_sm90_tile<T, Sm90WithTileHandover<Tile>, kCausal, kPaged, kMods>(p, stream);
  } else {
    launch_prefill_sm90_tile<T, Tile, kCausal, kPaged, kMods>(p, stream);
  }
}

// The head_dim's tile (Sm90PrefillTile), choosing the handover form as above.
template <typename T, int kHeadDim, bool kCausal, bool kPaged, bool kMods>
void launch_prefill_sm90_choosing_handover(const PrefillParams& p, cudaStream_t stream,
                                           int mode) {
  launch_prefill_sm90_tile_choosing_handover<T, Sm90PrefillTile<kHeadDim>, kCausal, kPaged,
                                             kMods>(p, stream, mode);
}

template <typename T, int kHeadDim, bool kCausal, bool kPaged>
void launch_prefill_sm90(const PrefillParams& p, cudaStream_t stream) {
  launch_prefill_sm90_choosing_handover<T, kHeadDim, kCausal, kPaged, false>(
      p, stream, cuda_tuning().prefill_sm90_handover);
}

// The window / softcap / ALiBi form; its handover where CudaTuning::prefill_sm90_mods_handover
// asks (mode 3: mode 2 at head_dim 128, else none; tuning.h has the measurements).
template <typename T, int kHeadDim, bool kPaged>
void launch_prefill_sm90_mods(const PrefillParams& p, cudaStream_t stream) {
  const int asked = cuda_tuning().prefill_sm90_mods_handover;
  const int mode = asked == 3 ? (kHeadDim == 128 ? 2 : 0) : asked;
  launch_prefill_sm90_choosing_handover<T, kHeadDim, false, kPaged, true>(p, stream, mode);
}

}  // namespace kvattn::cuda
