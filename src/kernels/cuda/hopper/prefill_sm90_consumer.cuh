// A consumer warpgroup of the Hopper prefill kernel: 64 query rows of one head against every
// key tile of the CTA, from the last tile to the first (so the tiles that need a mask, the
// causal diagonal and the ragged end of Lk, come first).
//
// GEMMs: S = Q K^T as D/16 wgmma with Q and K from shared memory (K-major); O += P V as
// kBlockN/16 wgmma with P from registers (the f32 accumulator layout of S is the A-fragment
// layout, so P is packed to 16 bits in place) and V from shared memory, transposed (V tiles are
// [key][head_dim], i.e. N-contiguous).
// Overlap inside the warpgroup (FlashAttention-3's intra-warpgroup pipelining): iteration i
// issues S_i = Q K_i, rescales O by tile i-1's correction while that GEMM runs, issues
// O += P_{i-1} V_{i-1}, waits for S_i only and runs tile i's mask and softmax while the P V
// GEMM is still on the tensor cores (Tile::kRescaleInTurn; false rescales after the P V GEMM
// instead: the same arithmetic, but on the path from S to the next GEMM issue, which the
// tensor cores wait on: 1-13% slower, session 14; with Tile::kRescaleBeforeTurn, head_dim 128
// and 256, the rescale moves before the wait for the GEMM turn instead). Registers: S
// (kBlockN/2 f32), P (kBlockN/4), O (D/2) per thread.
// Ping-pong between the consumer warpgroups (FlashAttention-3's warp scheduling barriers):
// they take turns to issue their GEMMs, round robin through named barriers, so that one
// warpgroup's softmax runs while another's GEMMs occupy the tensor cores.
//
// Keys past Lk inside the last tile are whatever the page (or the next sequence) holds, maybe
// NaN: their scores are masked to -inf, and the V rows are zeroed in shared memory before the
// P V GEMM reads them (0 * NaN would poison the row).
//
// kMods (window, softcap, ALiBi; prefill_mask.cuh's ScoreMods, exactly the ext kernel's
// arithmetic): the key tiles are n_first .. n_first + n_blocks - 1; every score gets softcap
// and ALiBi before the softmax, and the tiles that cross a window edge or Lk for this
// warpgroup's 64 rows are masked (kCausal is false: causal is the window's right bound 0).
#pragma once

#include <type_traits>

#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/prefill_sm90_softmax.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"
#include "kernels/cuda/hopper/wgmma_ops.cuh"
#include "kernels/cuda/prefill_mask.cuh"
#include "kernels/cuda/prefill_softmax.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

struct NoMods {};  // the plain kernels' stand-in for ScoreMods (no state, no code)

template <typename T, class Tile, bool kCausal, bool kMods = false>
struct PrefillConsumer {
  static_assert(!(kCausal && kMods), "kMods: causal is the window's right bound 0");
  static constexpr int D = Tile::kHeadDim;
  static constexpr int BN = Tile::kBlockN;
  static constexpr int kNT = BN / 8;
  static constexpr int kDT = D / 8;
  static constexpr int kConsumerThreads = 128 * Tile::kConsumerWarpgroups;
  static constexpr int kTailBarrier = 1;  // named barrier of the consumer warpgroups
  static constexpr int kTurnBarrier0 = 2;  // + w: warpgroup w's turn to issue GEMMs
  static constexpr int kWarpgroups = Tile::kConsumerWarpgroups;
  static_assert(kTurnBarrier0 + kWarpgroups <= 16);
  // Tile::kLeanLoop in the plain kernels (the window / softcap / ALiBi ones keep their loop).
  static constexpr bool kLean = Tile::kLeanLoop && !kMods;
  // Tile::kUniformWarpgroup where it was measured to pay: with the lean loop, and at head_dim
  // 256 (session 26, kMods included); alone at head_dim 64 / 128 it was even or 0.5-1% slower.
  static constexpr bool kUniformWg = Tile::kUniformWarpgroup && (kLean || D == 256);

  float o[kDT][4];
  RowSoftmax softmax;

  __device__ __forceinline__ static void issue_qk(const PrefillSmem<Tile>& s, uint32_t q_rows,
                                                  int stage, float (&sc)[kNT][4]) {
    // The Q descriptors are rebuilt per call, not kept: hoisted out of the key loop they held
    // 2 registers per K step (32 at head_dim 256, which then spilled).
    asm volatile("" : "+r"(q_rows));
    const SmemDescSw128 a(q_rows, 16);
    const SmemDescSw128 b(s.k(stage), 16);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 elements = 32 bytes per K step
      wgmma_ss<T, BN>(sc, a.at((kk / 4) * Tile::kBlockM * 128 + col),
                      b.at((kk / 4) * BN * 128 + col), kk > 0);
    }
    wgmma_commit();
  }

  __device__ __forceinline__ void issue_pv(const PrefillSmem<Tile>& s, int stage,
                                           const uint32_t (&pa)[BN / 16][4]) {
    const SmemDescSw128 b(s.v(stage), BN * 128);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs<T, D>(o, pa[kk], b.at(kk * 16 * 128), 1);
    wgmma_commit();
  }

  __device__ __forceinline__ static void pack_p(const float (&sc)[kNT][4],
                                                uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = ptx::pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      pa[kk][1] = ptx::pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      pa[kk][2] = ptx::pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[kk][3] = ptx::pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
    }
  }

  // Both consumer warpgroups: V rows [valid, BN) of `stage` <- 0 (whole 128-byte rows, so the
  // swizzle does not matter), then made visible to the tensor cores.
  __device__ __forceinline__ static void zero_v_tail(const PrefillSmem<Tile>& s, int stage,
                                                     int valid) {
    const int tid = static_cast<int>(threadIdx.x) - 128;
    const int pieces_per_block = (BN - valid) * 8;
    for (int i = tid; i < pieces_per_block * Tile::kColBlocks; i += kConsumerThreads) {
      const int c = i / pieces_per_block;
      const int r = valid + (i % pieces_per_block) / 8;
      const uint32_t addr = s.v(stage) + c * BN * 128 + r * 128 + (i % 8) * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
    }
    fence_proxy_async_smem();
    named_barrier_sync(kTailBarrier, kConsumerThreads);
  }

  // Turn-taking: warpgroup w waits for its turn (barrier 2 + w, completed by the previous
  // warpgroup's arrival), issues, then hands the turn on. Each warpgroup issues n_blocks + 1
  // times per tile, every warpgroup the same tiles. Per tile (turns_across_tiles == 0): the
  // last warpgroup primes barrier 2 at the tile's start and skips its final hand-over, so
  // every barrier sees as many arrivals as waits within the tile; warpgroup 0 then waits for
  // the last one's epilogue before the next tile. Across tiles (turns_across_tiles): primed
  // once per CTA and every hand-over made, so warpgroup 0's first GEMM of the next tile follows the last
  // warpgroup's final GEMM (FlashAttention-3's order), not its epilogue; the final hand-over
  // of the CTA's last tile is an arrival nobody waits for (as in FA3).
  __device__ __forceinline__ static void take_turn(int wg) {
    if constexpr (kWarpgroups > 1) named_barrier_sync(kTurnBarrier0 + wg, 256);  // this warpgroup + the arriving one
  }
  __device__ __forceinline__ static void pass_turn(int wg, bool skip_final) {
    if constexpr (kWarpgroups > 1) {
      if (!(skip_final && wg == kWarpgroups - 1)) {
        named_barrier_arrive(kTurnBarrier0 + (wg + 1) % kWarpgroups, 256);
      }
    }
  }
  // prime_turns: the first hand-over to warpgroup 0, per tile or once per CTA. Across tiles
  // with two consumer warpgroups (head_dim 128/256), and with three (head_dim 64, 128
  // registers a thread) in the plain kernels only: there the mode's extra live state spilled
  // the kMods kernels (session 11).
  __device__ __forceinline__ static bool turns_across_tiles(const PrefillSm90Params& p) {
    return (kWarpgroups == 2 || !kMods) && p.turns_across_tiles != 0;
  }
  __device__ __forceinline__ static void prime_turns(int wg) {
    if constexpr (kWarpgroups > 1) {
      if (wg == kWarpgroups - 1) named_barrier_arrive(kTurnBarrier0, 256);
    }
  }

  // wg: this consumer warpgroup; row0: its first query row within the sequence; kv_base: the
  // ring slot of the tile's first K/V tile; q_index: tiles with keys this CTA ran before.
  // kMods only: n_first (the first key tile), the sequence b, query head h and Lq.
  __device__ __forceinline__ void run(const PrefillSm90Params& p, const PrefillSmem<Tile>& s,
                                      int wg, int row0, int Lk, int causal_offset, int n_blocks,
                                      uint32_t kv_base, uint32_t q_index, int n_first = 0,
                                      int b = 0, int h = 0, int Lq = 0) {
    const int lane = threadIdx.x & 31;
    const int warp = (threadIdx.x >> 5) & 3;
    const int mask_row = row0 + warp * 16 + (lane >> 2);
    const int mask_col = 2 * (lane & 3);
    const float scale_log2 = p.base.scale_log2;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;
    }
    softmax.init();
    if (n_blocks == 0) return;

    // kMods: this warpgroup's rows [row0, row0 + 64) (all of them when the sequence ends
    // before: those rows are not stored, the mask only has to stay finite-or--inf for them).
    [[maybe_unused]] std::conditional_t<kMods, ScoreMods, NoMods> mods;
    if constexpr (kMods) {
      const int m_end = min(row0 + 64, Lq);
      mods.template init<BN>(p.base, b, h, row0, m_end > row0 ? m_end : row0 + 64, Lq, Lk);
    }
    // Tile::kLeanLoop, plain kernels: the key tiles n > n_unmasked_hi are the ones the mask
    // touches for this warpgroup's rows (the ragged end of Lk, then the causal diagonal), so the
    // loop asks one comparison instead of recomputing both bounds. (n + 1) BN > Lk <=> n >=
    // floor(Lk / BN); (n + 1) BN - 1 > r <=> n >= floor((r + 1) / BN), rounded down for r < -1
    // too (rows that see no key: every tile is masked).
    [[maybe_unused]] int n_unmasked_hi = 0;
    if constexpr (kLean) {
      n_unmasked_hi = Lk / BN;
      if constexpr (kCausal) {
        const int r1 = row0 + causal_offset + 1;
        n_unmasked_hi = min(n_unmasked_hi, r1 >= 0 ? r1 / BN : -((BN - 1 - r1) / BN));
      }
      n_unmasked_hi -= 1;
    }
    auto mask = [&](float(&sc)[kNT][4], int n) {
      if constexpr (kMods) {
        float(&s3)[1][kNT][4] = reinterpret_cast<float(&)[1][kNT][4]>(sc);
        mods.apply_bias(s3, mask_row, n * BN + mask_col);
        if (mods.tile_needs_mask(n)) mods.apply_mask(s3, mask_row, n * BN + mask_col);
      } else {
        bool need;
        if constexpr (kLean) {
          need = n > n_unmasked_hi;
        } else {
          need = (n + 1) * BN > Lk || (kCausal && (n + 1) * BN - 1 > row0 + causal_offset);
        }
        if (need) {
          float(&s3)[1][kNT][4] = reinterpret_cast<float(&)[1][kNT][4]>(sc);
          apply_mask<kCausal>(s3, mask_row, n * BN + mask_col, Lk, causal_offset);
        }
      }
    };
    // The first tile processed (the last key tile: n_blocks - 1, kMods n_first + n_blocks - 1)
    // is the only one that can reach past Lk. TMA leaves those V rows stale; the cp.async
    // gather producer zero-fills them itself. (Spelled out per form: the plain kernels then
    // compile to exactly the code they had before kMods.)
    const int tail_valid = kMods ? Lk - (n_first + n_blocks - 1) * BN : Lk - (n_blocks - 1) * BN;
    const bool zero_tail = tail_valid < BN && p.kv_gather == 0;

    if (!turns_across_tiles(p)) prime_turns(wg);
    mbar_wait(s.q_full, q_index & 1);
    // Tile::kUniformWarpgroup: wg as the warp's lane 0 has it, so that ptxas knows it is
    // warp-uniform and keeps the Q descriptors and the stage addresses in uniform registers (in
    // the head_dim 128 key loop the R2UR moves before the S = Q K^T wgmmas fall from 18 to 3,
    // 954 -> 940 instructions; FlashAttention-3 broadcasts its warpgroup index the same way).
    if constexpr (kUniformWg) wg = __shfl_sync(0xffffffffu, wg, 0);
    const uint32_t q_rows = s.q + wg * 64 * 128;  // this warpgroup's rows of column block 0

    float sc[kNT][4];
    uint32_t pa[BN / 16][4];
    float corr[2];
    // Tile::kRescaleInTurn: O *= corr (of the previous key tile) once S = Q K^T is issued,
    // pinned after that issue by fence_operands and ordered before the P V GEMM by wgmma_fence.
    // Compile-time only: a run-time branch around it made ptxas serialise every wgmma (C7520).
    auto rescale_in_turn = [&] {
      if constexpr (Tile::kRescaleInTurn && !Tile::kRescaleBeforeTurn) {
        fence_operands(o);
        RowSoftmax::rescale(o, corr);
        wgmma_fence();
      }
    };
    auto slot = [&](int it) { return static_cast<int>((kv_base + it) % Tile::kStages); };
    auto parity = [&](int it) { return ((kv_base + it) / Tile::kStages) & 1; };
    // Tile::kLeanLoop: the key loop steps its ring slot and phase (lean_stage, lean_phase: key
    // tile it; PipelineState's form) instead of deriving both from kv_base + it every key tile.
    int lean_stage = slot(0);
    uint32_t lean_phase = parity(0);
    // The Q tile is free for the next tile once the last S = Q K^T has completed. With the
    // tile handover (Tile::kProducerDecode) the arrival also frees the handed-tile slot that
    // every lane read: __syncwarp orders those reads before lane 0's arrival.
    auto release_q = [&](int it) {
      if (it != n_blocks - 1) return;
      if constexpr (Tile::kProducerDecode) __syncwarp();
      if (lane == 0) mbar_arrive(s.q_empty());
    };
    // Key tile 0: S, softmax, P.
    mbar_wait(s.k_full(slot(0)), parity(0));
    take_turn(wg);
    wgmma_fence();
    issue_qk(s, q_rows, slot(0), sc);
    pass_turn(wg, false);
    wgmma_wait<0>();
    fence_operands(sc);
    if (lane == 0) mbar_arrive(s.k_empty(slot(0)));
    release_q(0);
    mask(sc, kMods ? n_first + n_blocks - 1 : n_blocks - 1);  // the last key tile
    softmax.update(sc, scale_log2, corr);  // O is still 0: nothing to rescale
    pack_p(sc, pa);

    // Tile::kRescaleBeforeTurn: O *= corr before the warpgroup waits for its GEMM turn, pinned
    // there by fence_operands (O's last P V GEMM has completed), so the FMULs overlap that wait
    // instead of standing between the turn and the first GEMM issue; ptxas put most of them
    // there when they followed the S issue (FlashAttention-3's SASS has them before its turn
    // barrier). H200, session 25: -2% at 8x2048 and 16x1024 d128, -1.4% graph at 1x16384,
    // -4-5% on the head_dim 256 paged prefixes; +1.5-2.3% at head_dim 64 (three warpgroups),
    // which keeps the FMULs in the turn (Sm90PrefillTileFor).
    auto rescale_before_turn = [&] {
      if constexpr (Tile::kRescaleBeforeTurn) {
        RowSoftmax::rescale(o, corr);
        fence_operands(o);
      }
    };
    // Tile::kLeanLoop: the last key tile's V rows past Lk are zeroed here, once, rather than
    // under a test the loop makes (and reloads kv_gather for) every key tile.
    if constexpr (kLean) {
      if (n_blocks > 1 && zero_tail) {
        mbar_wait(s.v_full(lean_stage), lean_phase);
        zero_v_tail(s, lean_stage, tail_valid);
      }
    }
    for (int it = 1; it < n_blocks; ++it) {
      const int n = kMods ? n_first + n_blocks - 1 - it : n_blocks - 1 - it;
      const int prev_lean_stage = lean_stage;
      const uint32_t prev_lean_phase = lean_phase;
      if constexpr (kLean) {
        if (++lean_stage == Tile::kStages) {
          lean_stage = 0;
          lean_phase ^= 1u;
        }
      }
      const int stage = kLean ? lean_stage : slot(it);
      const int prev = kLean ? prev_lean_stage : slot(it - 1);
      rescale_before_turn();  // corr of tile it - 1
      mbar_wait(s.k_full(stage), kLean ? lean_phase : parity(it));
      mbar_wait(s.v_full(prev), kLean ? prev_lean_phase : parity(it - 1));
      if (!kLean && it == 1 && zero_tail) zero_v_tail(s, prev, tail_valid);
      take_turn(wg);
      wgmma_fence();
      issue_qk(s, q_rows, stage, sc);
      rescale_in_turn();  // corr of tile it - 1
      issue_pv(s, prev, pa);
      pass_turn(wg, false);
      wgmma_wait<1>();  // S_it is done; P_{it-1} V_{it-1} may still run
      fence_operands(sc);
      if (lane == 0) mbar_arrive(s.k_empty(stage));
      release_q(it);
      mask(sc, n);
      if constexpr (Tile::kMaxBeforeWait && !kMods) {  // the kMods kernels: 0.2-1% slower
        float mx_scaled[2];
        softmax.update_max(sc, scale_log2, corr, mx_scaled);
        schedule_boundary(it, mx_scaled);  // it >= 1
        wgmma_wait<0>();
        fence_operands(o);
        softmax.update_exp(sc, scale_log2, corr, mx_scaled);
      } else {
        softmax.update(sc, scale_log2, corr);
        wgmma_wait<0>();
        fence_operands(o);
      }
      if (lane == 0) mbar_arrive(s.v_empty(prev));
      if constexpr (!Tile::kRescaleInTurn) RowSoftmax::rescale(o, corr);
      pack_p(sc, pa);
    }

    const int last = kLean ? lean_stage : slot(n_blocks - 1);
    rescale_before_turn();  // corr of the last tile
    mbar_wait(s.v_full(last), kLean ? lean_phase : parity(n_blocks - 1));
    if (n_blocks == 1 && zero_tail) zero_v_tail(s, last, tail_valid);
    take_turn(wg);
    wgmma_fence();
    rescale_in_turn();  // corr of the last tile
    issue_pv(s, last, pa);
    pass_turn(wg, !turns_across_tiles(p));
    wgmma_wait<0>();
    fence_operands(o);
    if (lane == 0) mbar_arrive(s.v_empty(last));
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
