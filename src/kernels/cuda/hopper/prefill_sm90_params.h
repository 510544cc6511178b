// The parameter block and tile shape of the Hopper (sm_90a) prefill kernel.
//
// The kernel reads everything PrefillParams describes (prefill_params.h has the layouts and the
// trust rules) and loads Q, K and V tiles through TMA tensor maps built on the host over the
// same tensors (prefill_sm90_launch.cu):
//   tmap_q  3-D {head_dim, num_heads, total_q},        box {64, 1, kBlockM}
//   tmap_k/v packed: 3-D {head_dim, num_kv_heads, total_k}, box {64, 1, kBlockN}
//            paged:  4-D {head_dim, num_kv_heads, block_size, num_blocks},
//                    box {64, 1, kv_box_rows, 1}: kv_box_rows = gcd(block_size, kBlockN) keys
//                    of one page per box (a multiple of 8: whole swizzle atoms), kBlockN /
//                    kv_box_rows boxes per tile; a box never crosses a page.
// Every box lands 128-byte swizzled (sm90_ptx.cuh); rows past a tensor's end are zero-filled.
#pragma once

#include <cuda.h>

#include "kernels/cuda/prefill_params.h"

namespace kvattn::cuda {

struct PrefillSm90Params {
  CUtensorMap tmap_q;
  CUtensorMap tmap_k;
  CUtensorMap tmap_v;
  PrefillParams base;
  int kv_box_rows = 0;  // keys per TMA box (paged: gcd(block_size, kBlockN); packed: kBlockN)
  int kv_gather = 0;    // paged: 1 = K/V gathered by cp.async (prefill_sm90_gather.cuh), 0 = TMA
  int kv_producer_warps = 1;  // paged TMA: warps issuing a tile's page pieces (1..4)
  int out_vec16 = 0;  // out and its token stride allow 16-byte stores (the staged epilogue)
  int narrow_decode = 0;  // consumers decode tiles in 32-bit arithmetic (prefill_sm90_schedule)
  int turns_across_tiles = 0;  // 1: GEMM turns primed once per CTA (prefill_sm90_consumer.cuh)
  // Tile::kProducerDecode: the device's handover slots (prefill_handover_slots), one per SM id.
  void* handover_slots = nullptr;
  // Tile::kProducerDecode with one producer warp: the launch's tile counter pair
  // (prefill_tile_counter), or null. Set: the producer claims tiles as it frees up
  // (for_each_claimed_tile; section_unit is then 1); null: the static snake deal.
  uint32_t* tile_counter = nullptr;
  // The tile schedule (prefill_sm90_schedule.cuh, prefill_sm90_sections.h): (sequence, head)
  // pairs per L2 section, each section's slots padded to a multiple of section_unit (the
  // persistent grid's size, else 1), and the slots in all (heads x sequences x row blocks
  // tiles plus the padding).
  int64_t section = 1;
  int64_t section_unit = 1;
  int64_t num_tiles = 0;
};

// One CTA: a producer warpgroup (one warp issues the TMA loads) and kConsumerWarpgroups
// consumer warpgroups, each owning 64 of the kBlockM query rows of one head. K/V tiles of
// kBlockN keys stream through a kStages ring. Shared memory: Q [kHeadDim/64][kBlockM][64], then
// kStages K and kStages V tiles [kHeadDim/64][kBlockN][64], then the mbarriers. setmaxnreg
// moves registers from the producer warpgroup to the consumers (the totals fill the 64K file).
// kRescaleInTurn: the consumers rescale O between issuing S = Q K^T and O += P V
// (FlashAttention-3's order; the same arithmetic, bit-identical results), not after the P V
// GEMM completed (false: kept for the bench's comparison; session 14: true is 1-13% faster).
// kSmemEpilogue: each consumer warp stages its 16 output rows in shared memory (stmatrix) and
// writes them with 16-byte coalesced stores (prefill_sm90_epilogue.cuh), instead of 4-byte
// stores straight from the accumulators; 16 x (2 head_dim + 16) bytes a consumer warp more.
// kProducerDecode: the producer decodes each tile and hands it to the consumers in shared
// memory with its Q (prefill_sm90_tile_handover.cuh), so the consumers' tile decode (the
// cu_seqlens loads and section arithmetic between two tiles' GEMMs) leaves their path
// (FlashAttention-3's order; the plain kernels take it per launch where
// CudaTuning::prefill_sm90_handover asks: by default where key loops are short).
// The consumers' look-ahead tile decode (Tile::kConsumerLookAhead), on: H200, session 18, same
// call, C++ bench: 16x1024 d128 +2.5-2.7%, 8x2048 d128 +2.8% flushed, long and paged shapes
// within noise; the whole prefill suite passes with it. -DKVATTN_PREFILL_SM90_LOOKAHEAD=0
// builds the consumers without it (the comparison).
#ifndef KVATTN_PREFILL_SM90_LOOKAHEAD
#define KVATTN_PREFILL_SM90_LOOKAHEAD 1
#endif
inline constexpr bool kSm90LookAhead = KVATTN_PREFILL_SM90_LOOKAHEAD != 0;

// kRescaleBeforeTurn (with kRescaleInTurn): O's rescale moves before the warpgroup waits for
// its GEMM turn (prefill_sm90_consumer.cuh says why; the same arithmetic, bit-identical).
// kUniformWarpgroup: the consumers broadcast their warpgroup index from lane 0, so that ptxas
// keeps the S = Q K^T descriptors in uniform registers (prefill_sm90_consumer.cuh; R2UR moves
// in the key loop 10 / 18 / 35 -> 1 / 3 / 2 at head_dim 64 / 128 / 256). H200, session 26, two
// builds (on and off in the library) each with the other form as the bench's `uniformwg` row,
// two rounds: head_dim 256 +2.5-2.8% flushed on 8x2048 and both paged prefixes in all four
// comparisons (graph within its noise), so on there; head_dim 128 0.5-1% slower flushed at
// 8x2048 and 16x1024 and even elsewhere, head_dim 64 even: off there.
// kMaxBeforeWait: the softmax's row max (and corr) runs between the wait for S and the wait
// for the previous P V GEMM, the exponentials after it, kept in that order by a basic-block
// boundary (FlashAttention-3's SASS order; ptxas otherwise hoists the second wait over all
// but one FMNMX). Session 26: ncu's per-instruction samples at 1x16384 d128 put 22.9% of
// kvattn's warp samples on the wgmma waits against FA3's 13.8%. H200, same process, two
// rounds: head_dim 128 +1.4-1.7% flushed on 8x2048, 1x16384 and 16x1024 (graph +0.7%),
// packed prefix +2.7-5%, page 256 +0.7-2.9%, page 16 -1%; the d128 kMods kernels 0.2-1%
// slower (they keep the old order: prefill_sm90_consumer.cuh); head_dim 64 -0.5-1.5% and
// head_dim 256 mixed (+1% plain, -1.6% paged): off there. The same arithmetic.
// kLeanLoop: the key loop's bookkeeping without per-tile recomputation (session 26's ncu source
// view: kvattn's d128 key loop ran 535 SASS lines to FlashAttention-3's 488, the excess integer
// and control): the ring slot and phase stepped, not derived from kv_base + it; the V tail's
// zeroing peeled out of the loop (its test reloaded a kernel parameter every key tile); the
// mask test one comparison against a bound computed per tile. The plain kernels only (the
// window / softcap / ALiBi ones keep their loop). The same arithmetic on the scores.
template <int kHeadDim_, int kConsumerWarpgroups_, int kStages_, int kBlockN_,
          bool kRescaleInTurn_ = true, bool kSmemEpilogue_ = false, bool kProducerDecode_ = false,
          bool kRescaleBeforeTurn_ = false, bool kUniformWarpgroup_ = false,
          bool kMaxBeforeWait_ = false, bool kLeanLoop_ = false>
struct Sm90PrefillTileConfig {
  static constexpr bool kLeanLoop = kLeanLoop_;
  static constexpr bool kMaxBeforeWait = kMaxBeforeWait_;
  static constexpr bool kUniformWarpgroup = kUniformWarpgroup_;
  static constexpr bool kRescaleBeforeTurn = kRescaleBeforeTurn_ && kRescaleInTurn_;
  static constexpr bool kRescaleInTurn = kRescaleInTurn_;
  static constexpr bool kSmemEpilogue = kSmemEpilogue_;
  static constexpr bool kProducerDecode = kProducerDecode_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  // head_dim 256 (O alone is 128 registers a thread): FlashAttention-3's 24 / 240.
  static constexpr int kProducerRegs = kHeadDim == 256 ? 24 : (kConsumerWarpgroups == 2 ? 40 : 32);
  static constexpr int kConsumerRegs =
      kHeadDim == 256 ? 240 : (kConsumerWarpgroups == 2 ? 232 : 160);
  // The consumers decode their next tile during the current one (for_each_tile's kLookAhead:
  // 8 registers live across a tile) where they have the registers: at 160 (the three-warpgroup
  // head_dim 64 tile) ptxas spilled 72-128 bytes a thread with it. Built in where
  // KVATTN_PREFILL_SM90_LOOKAHEAD (below) asks.
  static constexpr bool kConsumerLookAhead = kSm90LookAhead && kConsumerRegs >= 232;
  // Paged K/V: up to four producer warps issue a tile's page pieces (kv_producer_warps), at
  // head_dim 128 (40 producer registers). Elsewhere the extra state spilled (ptxas, session
  // 14): at 24 or 32 registers, and at 40 in a two-warpgroup head_dim 64 tile.
  static constexpr bool kMultiWarpProducer = kProducerRegs >= 40 && kHeadDim == 128;
  static constexpr int kColBlocks = kHeadDim / 64;  // 64-element (128-byte) column blocks
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K (or V) stage
  // Barriers: q_full, q_empty, then k_full, k_empty, v_full, v_empty (kStages each).
  static constexpr int kNumBarriers = 2 + 4 * kStages;
  // The staged epilogue's rows: padded by 16 bytes so stmatrix's eight rows hit distinct banks.
  static constexpr int kOStageRowBytes = kHeadDim * 2 + 16;
  static constexpr int kOStageBytes =
      kSmemEpilogue ? 4 * kConsumerWarpgroups * 16 * kOStageRowBytes : 0;
  static_assert(kNumBarriers * 8 % 16 == 0, "the output stage follows the barriers, 16-aligned");
  // kProducerDecode: the handed-over tiles, last: a ring of 48-byte slots, one a tile of the
  // CTA's (and one for the end sentinel), as many as fit beside the tiles (at most 1024), so no
  // slot is written twice where the CTA's tiles fit (prefill_sm90_tile_handover.cuh says why;
  // the launch takes the handover only there).
  static constexpr int kHandoverSlotBytes = 48;
  static constexpr int kBaseSmemBytes =
      kQBytes + 2 * kStages * kKVBytes + kNumBarriers * 8 + kOStageBytes;
  static constexpr int kFittingSlots = (232448 - 1024 - kBaseSmemBytes) / kHandoverSlotBytes;
  static constexpr int kHandoverSlots =
      kProducerDecode ? (kFittingSlots < 1024 ? kFittingSlots : 1024) : 0;
  static constexpr int kWorkBytes = kHandoverSlots * kHandoverSlotBytes;
  static constexpr int kSmemBytes = kBaseSmemBytes + kWorkBytes;
  static constexpr int kSmemAlloc = kSmemBytes + 1024;  // room to align the base to 1024 bytes
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0 && kBlockN <= 256);
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWarpgroups <= 65536);
  static_assert(kSmemAlloc <= 232448, "more shared memory than an sm_90 CTA may have");
  static_assert(!kProducerDecode || kHandoverSlots >= 2, "a tile and the end sentinel");
};

// Tile::kProducerDecode in the library's base tiles: off (the plain kernels choose the handover
// form per launch: CudaTuning::prefill_sm90_handover); a build with
// -DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1 (CMAKE_CUDA_FLAGS) turns it on everywhere, the
// window / softcap / ALiBi kernels included, so the whole prefill GPU suite runs on it.
#ifndef KVATTN_PREFILL_SM90_PRODUCER_DECODE
#define KVATTN_PREFILL_SM90_PRODUCER_DECODE 0
#endif
inline constexpr bool kSm90ProducerDecode = KVATTN_PREFILL_SM90_PRODUCER_DECODE != 0;

// The tiles the library runs (docs/perf/NOTES.md, Hopper prefill). head_dim 128: 128 x 128
// tiles, two stages (160 KB; three: -2% one CTA per tile, and with the persistent grid +1-3% on
// long sequences but -4% at 16 x 1024), O's rescale before the GEMM turn (session 25: -2% at
// 8x2048 and 16x1024, -1.4% graph at 1x16384), the row max before the P V wait (session 26,
// above: +1.4-1.7%). head_dim 64: 192 query rows (three consumer
// warpgroups) x 128 keys, three stages (+14% over 128 rows). Both stage O in shared memory for
// their stores (session 15, H200: +3-8% graph on 8x2048 and 16x1024 d128, +3% 4x4096 d64).
// Session 27: head_dim 64 and 128 take the lean key loop with the uniform warpgroup index (the
// lean loop alone made ptxas build their descriptors in vector registers again, and spilled
// 8-24 bytes in three d64 kernels; together: d128's unmasked key tile 540 -> 505 SASS
// instructions, FlashAttention-3's 488; no spill). H200, same process, two rounds: every d128
// shape +1.5-5% flushed and +1.3-8.7% graph (1x16384 +4.5% graph), d64 +1.5-4.4%; head_dim
// 256's paged prefixes lost 1-4% with it: off there.
template <int kHeadDim>
struct Sm90PrefillTileFor;
template <>
struct Sm90PrefillTileFor<128> {
  using type =
      Sm90PrefillTileConfig<128, 2, 2, 128, true, true, kSm90ProducerDecode, true, true, true,
                            true>;
};
template <>
struct Sm90PrefillTileFor<64> {
  using type = Sm90PrefillTileConfig<64, 3, 3, 128, true, true, kSm90ProducerDecode, false, true,
                                     false, true>;
};
// head_dim 256 (FlashAttention-3's shape): 128 query rows (two consumer warpgroups, O in
// registers: 128 f32 per thread) x 80 keys, two stages: Q 64 KB + 2 x (K + V) 160 KB, the
// most that fits (session 14: 64 keys before; the fixed costs of a key tile over 25% more
// keys). O's rescale before the GEMM turn as at head_dim 128 (session 25, three rounds: the
// paged prefix shapes -3.6 to -5.4%, the plain ones even); the uniform warpgroup index (above);
// not the lean key loop (session 27, above).
template <>
struct Sm90PrefillTileFor<256> {
  using type = Sm90PrefillTileConfig<256, 2, 2, 80, true, false, kSm90ProducerDecode, true, true,
                                     false, false>;
};
template <int kHeadDim>
using Sm90PrefillTile = typename Sm90PrefillTileFor<kHeadDim>::type;

// The same tile with the producer-side tile decode (Tile::kProducerDecode), which the plain
// kernels take where CudaTuning::prefill_sm90_handover asks for it (prefill_sm90_launch.cuh).
template <class Tile>
using Sm90WithTileHandover =
    Sm90PrefillTileConfig<Tile::kHeadDim, Tile::kConsumerWarpgroups, Tile::kStages,
                          Tile::kBlockN, Tile::kRescaleInTurn, Tile::kSmemEpilogue, true,
                          Tile::kRescaleBeforeTurn, Tile::kUniformWarpgroup,
                          Tile::kMaxBeforeWait, Tile::kLeanLoop>;

}  // namespace kvattn::cuda
