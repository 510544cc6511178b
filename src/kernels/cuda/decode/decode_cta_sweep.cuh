// The CTA page sweep form of the split kernel's copy issue (CopyIssue::kCtaSweep,
// decode_params.h): the warps of a CTA, which visit the same tiles for different KV heads,
// copy one tile's K and V rows of all the CTA's heads together, consecutive threads on
// consecutive 16-byte chunks of the cache, instead of each warp copying its own head's 16 rows.
//
// Why: in the NHD cache ([blocks, block_size, kv_heads, head_dim]) a head's row of a float8
// head_dim 64 cache is 64 bytes, strided by kv_heads x 64; a warp's copy then touches eight
// separate 64-byte pieces, while the CTA's heads of one key are one contiguous run (the whole
// page when the CTA holds every head). read_rate (bench/micro, H200, session 31): the loads
// of 96 x 4096 9/3 fp8 d64 take 43.7 us by warp rows and 39.3 by CTA page sweeps (16-bit d64:
// 72.5 vs 72.2, no gain there).
//
// Contract (the launcher's decode_cta_sweep_eligible): every warp of every CTA has a unit (the
// CTA's heads divide num_kv_heads, its row chunks divide row_chunks), so all warps run the
// same tiles in the same order and meet at the one CTA barrier per tile that replaces the
// warp's __syncwarp (cp.async.wait_group, then the barrier: each thread's copies of the stage
// are complete and visible to every warp; and every warp has finished reading the stage
// refilled next). Aligned caches (16-byte rows and strides), no padded tile. The stage of head
// h (the CTA's h-th head) lives where warp h's own ring would: the warps of a head's row
// chunks (rc_per_cta > 1) share it.
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/decode/decode_warp_tile.cuh"

namespace kvattn::cuda {
namespace {

// A thread's fixed share of the CTA sweep's copies: chunk `chunk` of head h's row of keys
// key0, key0 + key_step, ... of every tile. The launcher's contract makes blockDim.x = heads x
// rc_per_cta x 32, a multiple of the chunks a key (heads x kChunks, kChunks dividing 32), so
// each thread keeps one (head, chunk) for the whole kernel: the divisions by the run-time
// head count run once a CTA (cta_sweep_lane), not once a tile or a copy (session 39's ncu: the
// copy loop's index arithmetic was ~20% of the issue-bound fp8 d64 kernel's instructions).
struct CtaSweepLane {
  int64_t src;        // byte offset of the thread's chunk in a key's row (all KV heads)
  uint32_t ring_off;  // byte offset of head h's ring from the CTA's first ring
  int chunk;
  int key0;
  int key_step;
  int iters;          // copies a tile (the same for every thread: the shuffles need whole warps)
};

template <typename KV, int D>
__device__ __forceinline__ CtaSweepLane cta_sweep_lane(int stages, int kvh0, int heads) {
  using L = KvTile<KV, D>;
  constexpr int64_t kRowBytes = int64_t{D} * sizeof(KV);  // one head's row
  static_assert(32 % L::kChunks == 0, "chunks a row divide a warp");
  const int per_key = heads * L::kChunks;
  CtaSweepLane s;
  s.key0 = static_cast<int>(threadIdx.x) / per_key;
  const int in_key = static_cast<int>(threadIdx.x) - s.key0 * per_key;
  const int h = in_key / L::kChunks;
  s.chunk = in_key - h * L::kChunks;
  s.key_step = static_cast<int>(blockDim.x) / per_key;
  s.iters = (kDecodeTileKeys + s.key_step - 1) / s.key_step;
  s.src = (kvh0 + h) * kRowBytes + s.chunk * 16;
  s.ring_off = static_cast<uint32_t>(h * stages * L::kStageBytes);
  return s;
}

// Copies the tile whose key k's (block id, in-block offset) lane k of every warp holds (nid,
// noff; lanes 0-15, the same in every warp; offset -1: past the length) for the CTA's heads
// (cta_sweep_lane's share of this thread) into stage `stage` of each head's ring (head h's
// stage s at tiles + (h * stages + s) * L::kStageBytes). Keys past the length and bad block
// ids are zero-filled (a bad id also recorded in the fault word), as issue_tile_lean does.
// Whole CTA.
template <typename KV, int D>
__device__ __forceinline__ void issue_tile_cta_sweep(const DecodeParams& p, uint32_t tiles,
                                                     int stage, const CtaSweepLane& s, int nid,
                                                     int noff, int lane) {
  using L = KvTile<KV, D>;
  constexpr int64_t kBytes = sizeof(KV);
  const bool key_ok = tile_key_ok(p, nid, noff, lane);
  const uint32_t copied = __ballot_sync(0xffffffffu, key_ok);  // bit k: key k (lanes 0-15)
  // Byte offset of key k's row of the CTA's first head in each cache (lane k); 0 for a key not
  // copied (an address inside the cache, never read: the copy zero-fills).
  const int64_t row = static_cast<int64_t>(noff) * p.num_kv_heads * D;
  const int64_t k_row = key_ok ? (static_cast<int64_t>(nid) * p.k_block_stride + row) * kBytes : 0;
  const char* const k_src = static_cast<const char*>(p.k_cache) + s.src;
  const char* const v_src = static_cast<const char*>(p.v_cache) + s.src;
  const uint32_t ring = tiles + s.ring_off + static_cast<uint32_t>(stage * L::kStageBytes);
  auto copy_rows = [&](auto same_strides) {
    constexpr bool kSame = decltype(same_strides)::value;
    [[maybe_unused]] int64_t v_row = 0;
    if constexpr (!kSame) {
      v_row = key_ok ? (static_cast<int64_t>(nid) * p.v_block_stride + row) * kBytes : 0;
    }
    int key = s.key0;
#pragma unroll 1
    for (int i = 0; i < s.iters; ++i, key += s.key_step) {
      const int from = key & (kDecodeTileKeys - 1);  // in range; unused where key >= 16
      const int64_t ko = __shfl_sync(0xffffffffu, k_row, from);
      int64_t vo = ko;
      if constexpr (!kSame) vo = __shfl_sync(0xffffffffu, v_row, from);
      if (key < kDecodeTileKeys) {  // a key_step past 16 (rc_per_cta 3) leaves threads idle
        const bool ok = ((copied >> key) & 1u) != 0;
        const uint32_t dst = L::addr(ring, key, s.chunk);
        cp_async_16(dst, k_src + ko, ok);
        cp_async_16(dst + L::kTileBytes, v_src + vo, ok);
      }
    }
  };
  if (p.k_block_stride == p.v_block_stride) {  // the usual layout: one offset for both caches
    copy_rows(std::true_type{});
  } else {
    copy_rows(std::false_type{});
  }
}

}  // namespace
}  // namespace kvattn::cuda
