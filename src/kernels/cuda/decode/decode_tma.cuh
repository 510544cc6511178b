// The TMA form of the decode kernels' copy issue (CopyIssue::kTma, decode_params.h): a warp's
// 16-key K and V tiles land in its pipeline stage by tensor-map loads that one lane issues,
// completing on the stage's mbarrier, instead of 32 lanes issuing 16-byte cp.async copies
// (ncu, session 27: at head_dim 64 the copy issue and the block-id arithmetic were ~270 of a
// tile's 521 instructions).
//
// Eligible (decode_tma_eligible): sm_90a, 16-bit caches at head_dim 64, 128 or 256 (not the
// padded 80 and 96) and float8_e4m3 caches at 128, plain and extended kernels, block_size a
// multiple of 16, 16-byte aligned caches and strides. Then a tile's 16 keys (tiles start at
// multiples of 16 keys) all lie in one page: one box {128 bytes of dims, 1 head, 16 keys, 1
// block} per 128 bytes of a head's row, for K and for V, at the page of its first visited key.
// - Tensor maps (DecodeParams::tmap_k / tmap_v, built by the launcher): the cache as
//   {head_dim, num_kv_heads, block_size, num_blocks} with the 128-byte swizzle.
// - Stage layout (TmaTile, Fp8TmaTile): per 128 bytes of row a "column block" of 16 rows x
//   128 bytes, chunk c of key row r at chunk c ^ (r % 8) (the swizzle TMA writes); at head_dim
//   64 this is Tile<64> exactly. Tiles start on 1024-byte boundaries (the swizzle atom). The
//   fp8 tile's 128-byte rows (head_dim 128) replace its padded pitch: its K reads (8 rows, one
//   chunk) and V reads (keys 2t.., chunks 2c, 2c + 1) land on 32 banks under the swizzle too.
//   (At fp8 head_dim 64 a 64-byte row would share a swizzle line with its neighbour and the V
//   reads would meet 2-way conflicts; not built.)
// - The tile past a sequence's end: its rows past the length hold whatever the page holds
//   (the box loads whole pages' rows); so do an extended kernel's rows before its first key
//   (its pad or window edge) in its first tile. K there is masked (the scores are replaced by
//   -inf); V there is zeroed in shared memory after the tile lands (TmaRing::clear_unvisited):
//   P = 0 times a NaN would still be NaN.
// - A bad block id (outside [0, num_blocks)) is never loaded: the stage is zeroed by the warp
//   and the fault recorded, as the cp.async forms zero-fill such keys.
// - One mbarrier per stage and warp (count 1: the issuing lane's arrive.expect_tx); the warp
//   waits on the stage's parity, which flips each time the ring wraps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda {
namespace {

// Bytes of a column block: 16 key rows of 128 bytes.
inline constexpr int kTmaColBlockBytes = kDecodeTileKeys * 128;

// Chunk c (16 bytes) of key row `key` in a TMA stage tile: column blocks of 16 rows x 128
// bytes, the 128-byte swizzle inside each.
__device__ __forceinline__ uint32_t tma_tile_addr(uint32_t base, int key, int chunk) {
  return base + (chunk >> 3) * kTmaColBlockBytes + key * 128 + (((chunk & 7) ^ (key & 7)) << 4);
}

// The TMA stage layout of a 16-bit tile of head_dim D (see above): same sizes as Tile<D>;
// boxes of 64 elements.
template <int D>
struct TmaTile : Tile<D> {
  static_assert(D % 64 == 0, "TMA tiles are whole 64-element column blocks");
  static constexpr int kBoxElems = 64;
  static constexpr int kBoxes = D / kBoxElems;
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    return tma_tile_addr(base, key, chunk);
  }
};

// The TMA stage layout of a float8_e4m3 tile (head_dim 128 only, see above): Fp8Tile's reads
// over 128-byte rows without the pad; one box of 128 codes.
template <int D>
struct Fp8TmaTile : Fp8Tile<D> {
  static_assert(D == 128, "fp8 TMA tiles: head_dim 128 (one 128-byte column block)");
  static constexpr int kTileBytes = kDecodeTileKeys * D;
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kBoxElems = 128;
  static constexpr int kBoxes = 1;
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    return tma_tile_addr(base, key, chunk);
  }
  // Fp8Tile::read_addr in this layout. With `base` on a 1024-byte boundary (every stage tile
  // here) and one 128-byte column block, base + key * 128 + (((chunk ^ key) & 7) << 4) + byte
  // = (base + key * 128 + ((key & 7) << 4) + byte) ^ (chunk << 4): bits 4-6 of the sum are
  // those of (key & 7) << 4 alone. So the per-lane part is added once a tile and each read
  // XORs the loop's chunk in as an immediate (one LOP3), where tma_tile_addr's form had ptxas
  // recompute the swizzle for every read (~80 of a warp-tile's ~480 instructions, session 47).
  static constexpr bool kXorReads = true;
  __device__ __forceinline__ static uint32_t read_addr(uint32_t base, int key, int chunk_lane,
                                                       int byte, int chunk_const) {
    const uint32_t lane = base + static_cast<uint32_t>(key * 128 + ((key & 7) << 4) + byte);
    return (lane ^ static_cast<uint32_t>(chunk_lane << 4)) ^
           static_cast<uint32_t>(chunk_const << 4);
  }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// sm90::tma_load_4d with an L2 cache policy (createpolicy; the small kernel's evict-first).
__device__ __forceinline__ void tma_load_4d_hint(uint32_t dst, const void* tmap, uint32_t bar,
                                                 int c0, int c1, int c2, int c3,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Asks L2 for the box at (c0, c1, c2, c3) of a tensor map (no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_4d(const void* tmap, int c0, int c1, int c2,
                                                int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   tmap),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
#endif

// The stage layout a kernel of copy issue kIssue reads: a TMA tile for kTma, else KvTile.
template <typename KV, int D, CopyIssue kIssue>
using StageTile =
    std::conditional_t<kIssue == CopyIssue::kTma,
                       std::conditional_t<kIsFp8<KV>, Fp8TmaTile<D>, TmaTile<D>>, KvTile<KV, D>>;

// Shared memory a TMA kernel asks for beyond its tiles: the 1024-byte alignment of the tile
// region and one 8-byte mbarrier per stage and warp.
inline constexpr int kDecodeTmaSmemExtra = 1024 + 8 * kDecodeMaxWarps * kDecodeMaxStages;

// One warp's ring of `stages` stages of the TMA tile L (TmaTile, Fp8TmaTile) and their
// mbarriers. `region`: the first byte of the CTA's tile region (its start is rounded up to
// 1024 here; the launcher added kDecodeTmaSmemExtra bytes); `warps`: the CTA's warps. (Named
// in every kernel; its members are compiled only in the kTma ones.)
template <class L>
struct TmaRing {
  uint32_t tiles = 0;  // this warp's stage 0
  uint32_t bars = 0;   // this warp's stage 0 mbarrier
  uint32_t parity = 0; // of the stage waited on next (flips as the consumer's stage wraps)

  __device__ __forceinline__ void init(uint32_t region, int warp, int warps, int stages,
                                       int lane) {
    const uint32_t base = (region + 1023u) & ~1023u;
    tiles = base + static_cast<uint32_t>(warp * stages * L::kStageBytes);
    bars = base + static_cast<uint32_t>(warps * stages * L::kStageBytes + warp * stages * 8);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (lane == 0) {
      for (int s = 0; s < stages; ++s) sm90::mbar_init(bars + 8 * s, 1);
      sm90::fence_barrier_init();
    }
    __syncwarp();
#else
    (void)lane;
    __trap();  // never launched: decode_tma_eligible asks for sm_90a code
#endif
  }

  __device__ __forceinline__ uint32_t stage(int s) const {
    return tiles + static_cast<uint32_t>(s * L::kStageBytes);
  }

  // Loads the tile whose key k is lane k's (block id nid, in-block offset noff; -1: not
  // visited, i.e. past the length or before an extended kernel's first key) for KV head kvh
  // into stage s: the page of its first visited key, rows from the tile's first key (all its
  // keys share the page). Whole warp. kHint: with the L2 cache `policy` (as the cp.async
  // forms' issue_tile).
  template <bool kHint>
  __device__ __forceinline__ void issue(const DecodeParams& p, int s, int nid, int noff,
                                        int lane, int kvh, uint64_t policy) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const uint32_t dst = stage(s);
    const uint32_t bar = bars + 8 * s;
    const uint32_t visited = __ballot_sync(0xffffffffu, lane < kDecodeTileKeys && noff >= 0);
    const int src = visited != 0 ? __ffs(visited) - 1 : 0;
    const int id = __shfl_sync(0xffffffffu, nid, src);
    const int off = __shfl_sync(0xffffffffu, noff, src) - src;  // the tile's first key
    if (visited != 0 && static_cast<unsigned>(id) < static_cast<unsigned>(p.num_blocks)) {
      if (lane == 0) {
        sm90::mbar_arrive_expect_tx(bar, L::kStageBytes);
#pragma unroll
        for (int cb = 0; cb < L::kBoxes; ++cb) {
          const uint32_t kd = dst + cb * kTmaColBlockBytes;
          const int c0 = cb * L::kBoxElems;
          if constexpr (kHint) {
            tma_load_4d_hint(kd, &p.tmap_k, bar, c0, kvh, off, id, policy);
            tma_load_4d_hint(kd + L::kTileBytes, &p.tmap_v, bar, c0, kvh, off, id, policy);
          } else {
            sm90::tma_load_4d(kd, &p.tmap_k, bar, c0, kvh, off, id);
            sm90::tma_load_4d(kd + L::kTileBytes, &p.tmap_v, bar, c0, kvh, off, id);
          }
        }
      }
      return;
    }
    // A bad block id, or no visited key (an extended kernel's sequence whose pad is its
    // length): zeros, as the cp.async forms; only a visited key's bad id is a fault.
    if (lane == 0 && visited != 0) record_fault(p.fault_word, kFaultBlockOutOfRange);
    for (int i = lane; i < L::kStageBytes / 16; i += 32) {
      st_shared_16(dst + 16 * i, make_uint4(0, 0, 0, 0));
    }
    sm90::fence_proxy_async_smem();  // before a later TMA load writes these bytes again
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(bar);
#else
    (void)p, (void)s, (void)nid, (void)noff, (void)lane, (void)kvh, (void)policy;
    __trap();
#endif
  }

  // Asks L2 for the tile after the one issue() takes, from lane 16's (block id, offset): its
  // first key's, which lanes 16-31 hold as lanes 0-15 hold issue()'s (DecodeParams::
  // tma_prefetch). A hint: skipped where that key is not visited (an extended kernel's first
  // tile) or its id is bad. One lane, no shuffle (a ballot and shuffles here took the swapped
  // d64 twin from 80 to 98 registers).
  __device__ __forceinline__ void prefetch_next(const DecodeParams& p, int nid, int noff,
                                                int lane, int kvh) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (lane == kDecodeTileKeys && noff >= 0 &&
        static_cast<unsigned>(nid) < static_cast<unsigned>(p.num_blocks)) {
#pragma unroll
      for (int cb = 0; cb < L::kBoxes; ++cb) {
        tma_prefetch_4d(&p.tmap_k, cb * L::kBoxElems, kvh, noff, nid);
        tma_prefetch_4d(&p.tmap_v, cb * L::kBoxElems, kvh, noff, nid);
      }
    }
#else
    (void)p, (void)nid, (void)noff, (void)lane, (void)kvh;
    __trap();
#endif
  }

  // Waits until stage s (the consumer's next) has landed; flips the parity when s is the last
  // stage of the ring.
  __device__ __forceinline__ void wait(int s, int stages) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    sm90::mbar_wait(bars + 8 * s, parity);
#else
    __trap();
#endif
    if (s == stages - 1) parity ^= 1u;
  }

  // Zeroes the V rows of the landed stage s outside [lo, hi) (0 <= lo < hi <= 16): the rows
  // past a sequence's end, and before an extended kernel's first key, hold the page's other
  // rows. Whole warp.
  __device__ __forceinline__ void zero_outside(int s, int lo, int hi, int lane) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const uint32_t v = stage(s) + L::kTileBytes;
    const int n = (kDecodeTileKeys - (hi - lo)) * L::kChunks;
    for (int i = lane; i < n; i += 32) {
      int key = i / L::kChunks;
      if (key >= lo) key += hi - lo;  // rows [0, lo), then [hi, 16)
      st_shared_16(L::addr(v, key, i % L::kChunks), make_uint4(0, 0, 0, 0));
    }
    sm90::fence_proxy_async_smem();  // before a later TMA load writes these bytes again
    __syncwarp();
#else
    (void)s, (void)lo, (void)hi, (void)lane;
    __trap();
#endif
  }

  // After wait(s): zero_outside for the tile of keys [key0, key0 + 16) of a sequence whose
  // visited keys are [first, len) (first 0 for the plain kernels), when the tile holds keys
  // outside them. (A tile with none visited was zeroed whole by issue.) Warp-uniform
  // arguments.
  __device__ __forceinline__ void clear_unvisited(int s, int key0, int first, int len,
                                                  int lane) const {
    const int lo = max(first - key0, 0);
    const int hi = min(len - key0, kDecodeTileKeys);
    if (lo < hi && (lo > 0 || hi < kDecodeTileKeys)) zero_outside(s, lo, hi, lane);
  }

  // Invalidates the warp's mbarriers before the shared memory is reused (small kernel).
  __device__ __forceinline__ void release(int stages, int lane) const {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (lane == 0) {
      for (int s = 0; s < stages; ++s) {
        asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bars + 8 * s) : "memory");
      }
    }
#else
    (void)stages, (void)lane;
#endif
  }
};

}  // namespace
}  // namespace kvattn::cuda
