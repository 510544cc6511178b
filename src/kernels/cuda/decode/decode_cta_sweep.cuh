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

// Copies the tile whose key k's (block id, in-block offset) lane k of every warp holds (nid,
// noff; lanes 0-15, the same in every warp; offset -1: past the length) for the CTA's `heads`
// KV heads from kvh0 on into stage `stage` of each head's ring (head h's stage s at
// tiles + (h * stages + s) * L::kStageBytes). Keys past the length and bad block ids are
// zero-filled (a bad id also recorded in the fault word), as issue_tile_lean does. Whole CTA.
template <typename KV, int D>
__device__ __forceinline__ void issue_tile_cta_sweep(const DecodeParams& p, uint32_t tiles,
                                                     int stage, int stages, int nid, int noff,
                                                     int lane, int kvh0, int heads) {
  using L = KvTile<KV, D>;
  constexpr int64_t kBytes = sizeof(KV);
  constexpr int64_t kRowBytes = int64_t{D} * kBytes;  // one head's row
  const bool key_ok = tile_key_ok(p, nid, noff, lane);
  const uint32_t copied = __ballot_sync(0xffffffffu, key_ok);  // bit k: key k (lanes 0-15)
  // Byte offset of key k's row of KV head kvh0 in each cache (lane k); 0 for a key not copied
  // (an address inside the cache, never read: the copy zero-fills).
  const int64_t row = static_cast<int64_t>(noff) * p.num_kv_heads * D;
  const int64_t k_row = key_ok ? (static_cast<int64_t>(nid) * p.k_block_stride + row) * kBytes : 0;
  const int64_t v_row = key_ok ? (static_cast<int64_t>(nid) * p.v_block_stride + row) * kBytes : 0;
  const char* const k_heads = static_cast<const char*>(p.k_cache) + kvh0 * kRowBytes;
  const char* const v_heads = static_cast<const char*>(p.v_cache) + kvh0 * kRowBytes;
  // Chunk i of the tile: key i / per_key, then the heads' rows of that key in cache order.
  // total is a multiple of 32 (16 keys x an even chunk count) and blockDim.x of 32, so each
  // iteration's shuffles run in whole warps. (key, in_key) = divmod(i, per_key) steps with i
  // by divmod(blockDim.x, per_key): two divisions by the run-time per_key a call, the same for
  // every tile of the CTA, not one a copy (session 39: that signed division a copy was ~11% of
  // the issue-bound fp8 d64 kernel's instructions; removing it: -2 to -3.4%).
  static_assert((L::kChunks & (L::kChunks - 1)) == 0, "chunks a row: a power of two");
  const unsigned per_key = static_cast<unsigned>(heads * L::kChunks);
  const unsigned total = kDecodeTileKeys * per_key;
  const unsigned step_key = blockDim.x / per_key;
  const unsigned step_in = blockDim.x - step_key * per_key;
  unsigned key = threadIdx.x / per_key;
  unsigned in_key = threadIdx.x - key * per_key;
#pragma unroll 1
  for (unsigned i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = static_cast<int>(in_key / L::kChunks);
    const int chunk = static_cast<int>(in_key % L::kChunks);
    const int64_t ko = __shfl_sync(0xffffffffu, k_row, static_cast<int>(key));
    const int64_t vo = __shfl_sync(0xffffffffu, v_row, static_cast<int>(key));
    const bool ok = ((copied >> key) & 1u) != 0;
    const int64_t within = h * kRowBytes + chunk * 16;
    const uint32_t ring = tiles + static_cast<uint32_t>((h * stages + stage) * L::kStageBytes);
    const uint32_t dst = L::addr(ring, static_cast<int>(key), chunk);
    cp_async_16(dst, k_heads + ko + within, ok);
    cp_async_16(dst + L::kTileBytes, v_heads + vo + within, ok);
    key += step_key;
    in_key += step_in;
    if (in_key >= per_key) {
      in_key -= per_key;
      ++key;
    }
  }
}

}  // namespace
}  // namespace kvattn::cuda
