// The producer of the Hopper prefill kernel: one warp of the producer warpgroup issues every
// TMA load of a CTA (paged K/V: kv_producer_warps warps, see below). Q once; then the K and V
// tiles from the last key tile to the first (the consumers' order), each into ring stage
// it % kStages once every consumer warp released that stage. Packed K/V: one box per 64-column
// block and tile. Paged K/V: piece i of the tile (kv_box_rows keys of one page) is loaded by
// lane i / W of warp i % W (W = kv_producer_warps), so a tile of 16-key pages is 8 pieces
// issued in parallel; a page outside the sequence is not looked up and a bad block id is
// reported (kFaultBlockOutOfRange): both load as zeros (a block coordinate past the tensor).
// TMA takes uniform operands, so a warp issues its lanes' boxes one after another: W > 1
// spreads the boxes of small pages over W warps (and schedulers). Warp 0 alone loads Q and
// arms each full barrier with the tile's bytes; another warp's boxes may land first (the
// barrier's transaction count goes negative meanwhile, which the PTX ISA allows: the phase
// cannot complete before warp 0's arrival).
// kMods (window, softcap, ALiBi): the key tiles n_first .. n_first + n_blocks - 1, and a page
// piece wholly outside the keys [lo_key, hi_key) some row of the tile sees is not looked up
// either (zeros; the consumers mask those keys), so pages outside a window are never read.
#pragma once

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One thread: the Q tile's TMA boxes (rows q_row0.. of head h), completing on q_full (armed
// by the caller with their bytes); issue_q arms it and issues them.
template <class Tile>
__device__ __forceinline__ void issue_q_boxes(const PrefillSm90Params& p,
                                              const PrefillSmem<Tile>& s, int q_row0, int h) {
#pragma unroll
  for (int c = 0; c < Tile::kColBlocks; ++c) {
    tma_load_3d(s.q + c * Tile::kBlockM * 128, &p.tmap_q, s.q_full, c * 64, h, q_row0);
  }
}

template <class Tile>
__device__ __forceinline__ void issue_q(const PrefillSm90Params& p,
                                        const PrefillSmem<Tile>& s, int q_row0, int h) {
  mbar_arrive_expect_tx(s.q_full, Tile::kQBytes);
  issue_q_boxes(p, s, q_row0, h);
}

// The Q tile of the next tile with keys (q_index of them were loaded before): waits until the
// consumers are done with the previous Q, then `issuer` arms q_full and issues the TMA boxes.
template <class Tile>
__device__ __forceinline__ void load_q(const PrefillSm90Params& p, const PrefillSmem<Tile>& s,
                                       int q_row0, int h, uint32_t q_index, bool issuer) {
  if (q_index > 0) mbar_wait(s.q_empty(), (q_index - 1) & 1);
  if (issuer) issue_q(p, s, q_row0, h);
}

template <class Tile, bool kPaged, bool kMods = false>
struct PrefillProducer {
  static constexpr int BN = Tile::kBlockN;

  const PrefillSm90Params& p;
  const PrefillSmem<Tile>& s;
  int kv_head;
  int k_begin;  // packed: first key row of the sequence
  int Lk;
  const int32_t* bt_row;  // paged: the sequence's block-table row
  // kMods only: the first key tile, and the keys some row of the tile sees.
  int n_first = 0;
  int lo_key = 0;
  int hi_key = 0;

  // Paged: the block and in-block offset of this lane's piece of tile n (block = num_blocks,
  // past the tensor, for a piece outside the sequence or a bad id: TMA zero-fills it).
  struct Piece {
    int block;
    int offset;
  };
  // Several producer warps: paged tiles of the configurations with the registers for it.
  static constexpr bool kMultiWarp = kPaged && Tile::kMultiWarpProducer;
  // Lane, warp and piece from threadIdx and the parameters, not kept in registers.
  __device__ __forceinline__ static int lane() { return static_cast<int>(threadIdx.x & 31); }
  __device__ __forceinline__ static int warp() {
    return kMultiWarp ? static_cast<int>(threadIdx.x >> 5) : 0;
  }
  // This lane's piece of a tile (>= BN / kv_box_rows: none).
  __device__ __forceinline__ int piece_index() const {
    return kMultiWarp ? lane() * p.kv_producer_warps + warp() : lane();
  }

  __device__ __forceinline__ Piece lookup(int n) const {
    Piece piece{p.base.num_blocks, 0};
    const int rows = p.kv_box_rows;
    const int j0 = n * BN + piece_index() * rows;  // first key of this lane's piece
    if (piece_index() < BN / rows && (kMods ? j0 < hi_key && j0 + rows > lo_key : j0 < Lk)) {
      const int idx = j0 / p.base.block_size;
      piece.offset = j0 - idx * p.base.block_size;
      const int id = __ldg(bt_row + idx);
      if (id >= 0 && id < p.base.num_blocks) {
        piece.block = id;
      } else {
        record_fault(p.base.fault_word, kFaultBlockOutOfRange);
      }
    }
    return piece;
  }

  // Issues the loads of one K (or V) tile n into `dst`; lane 0 has armed `bar` already.
  __device__ __forceinline__ void load_tile(const CUtensorMap* tmap, uint32_t dst, uint32_t bar,
                                            int n, Piece piece) const {
    if constexpr (!kPaged) {
      if (threadIdx.x == 0) {
#pragma unroll
        for (int c = 0; c < Tile::kColBlocks; ++c) {
          tma_load_3d(dst + c * BN * 128, tmap, bar, c * 64, kv_head, k_begin + n * BN);
        }
      }
    } else {
      const int rows = p.kv_box_rows;
      const int i = piece_index();
      if (i < BN / rows) {
#pragma unroll
        for (int c = 0; c < Tile::kColBlocks; ++c) {
          tma_load_4d(dst + c * BN * 128 + i * rows * 128, tmap, bar, c * 64, kv_head,
                      piece.offset, piece.block);
        }
      }
    }
  }

  // One tile: its Q (once the consumers are done with the previous tile's Q: q_index tiles
  // were loaded before this one; not with_q: the tile handover loaded it), then its n_blocks
  // K/V tiles into ring slots kv_base.. (the ring counts K/V tiles across all tiles of the CTA).
  __device__ __forceinline__ void run(int q_row0, int h, int n_blocks, uint32_t kv_base,
                                      uint32_t q_index, bool with_q = true) const {
    if (n_blocks == 0) return;
    if (with_q && warp() == 0) load_q(p, s, q_row0, h, q_index, lane() == 0);
    // K of tile it, then V of tile it - 1: the order the consumers use them in, so a K load
    // never waits behind the release of a V stage.
    Piece prev_piece{0, 0};
    for (int it = 0; it <= n_blocks; ++it) {
      if (it < n_blocks) {
        const int n = kMods ? n_first + n_blocks - 1 - it : n_blocks - 1 - it;
        const uint32_t g = kv_base + it;
        const int stage = g % Tile::kStages;
        // The block-table read goes before the wait, so its latency hides behind it.
        Piece piece{0, 0};
        if constexpr (kPaged) piece = lookup(n);
        // Slot reuse: wait until every consumer warp released it in the previous round.
        if (g >= Tile::kStages) mbar_wait(s.k_empty(stage), (g / Tile::kStages - 1) & 1);
        if (threadIdx.x == 0) mbar_arrive_expect_tx(s.k_full(stage), Tile::kKVBytes);
        __syncwarp();
        load_tile(&p.tmap_k, s.k(stage), s.k_full(stage), n, piece);
        if (it > 0) load_v(g - 1, n + 1, prev_piece);
        prev_piece = piece;
      } else {
        load_v(kv_base + it - 1, kMods ? n_first : 0, prev_piece);
      }
    }
  }

  // V of key tile n into ring slot g.
  __device__ __forceinline__ void load_v(uint32_t g, int n, Piece piece) const {
    const int stage = g % Tile::kStages;
    if (g >= Tile::kStages) mbar_wait(s.v_empty(stage), (g / Tile::kStages - 1) & 1);
    if (threadIdx.x == 0) mbar_arrive_expect_tx(s.v_full(stage), Tile::kKVBytes);
    __syncwarp();
    load_tile(&p.tmap_v, s.v(stage), s.v_full(stage), n, piece);
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
