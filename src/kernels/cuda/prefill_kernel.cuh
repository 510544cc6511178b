// The prefill mainloop: FlashAttention-2 on mma.sync (sm_80+), one CTA per (head, sequence,
// block of kBlockM query rows).
//
// Per CTA: Q tile [kBlockM, D] stays in shared memory; K and V tiles [kBlockN, D] stream through
// a 2-stage cp.async ring (tile i+1 loads while tile i is computed; one __syncthreads per
// tile). Each warp owns kBlockM / kNWarps query rows (16 or 32) and the full kBlockN columns,
// so the softmax row reductions stay inside a quad of lanes. Shared rows are D*2 bytes with the
// 16-byte pieces XOR-swizzled by (row % 8), which makes every ldmatrix and cp.async
// conflict-free. Key tiles run from the last to the first, so the (at most two) tiles that need
// masking (causal diagonal, the ragged end of Lk) come first and the rest run unmasked.
//
// Paged keys: each 16-byte piece of a K/V row resolves its block through the block table; when
// block_size is a multiple of kBlockN a whole tile lies in one block and is resolved once.
// Block ids outside [0, num_blocks) are zero-filled and reported (kFaultBlockOutOfRange).
//
// kExt (the "extended" kernels, ExtPrefillTile): sliding window, softcap and ALiBi
// (prefill_mask.cuh), causal as the window's right bound 0, and the tensors' head_dim read at
// run time: 80 and 96 run on the 128-wide tile with the missing 16-byte pieces of Q, K and V
// zero-filled (so they add 0 to Q K^T, and the padded output columns are not stored), 256 on
// its own tile. A CTA visits only the key tiles some of its rows can see (a window's left edge
// moves the first tile, not just the mask). The plain kernels (kExt = false) compile exactly
// as before: the window and padding code is behind `if constexpr`.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/fp8_convert.cuh"
#include "kernels/cuda/prefill_launch.h"
#include "kernels/cuda/prefill_mask.cuh"
#include "kernels/cuda/prefill_params.h"
#include "kernels/cuda/ptx.cuh"
#include "kernels/cuda/smem_limit.h"
#include "kernels/cuda/prefill_softmax.cuh"
#include "kvattn/core/error.h"

namespace kvattn::cuda {

// Tile shape. kMinBlocks feeds __launch_bounds__ (CTAs per SM the register budget must allow).
// kPrefetchTable (paged only): block ids fetched with cp.async two tiles ahead and resolved to
// row addresses, instead of a synchronous block-table load one tile ahead. Measured 2-3% slower
// with kBlockN 48 and fastest with kBlockN 64 (docs/perf/NOTES.md, CUDA prefill, v2); the
// benchmark times it with the 64-key tile, the candidate default.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocks_,
          bool kPrefetchTable_ = false>
struct PrefillTile {
  static constexpr bool kPrefetchTable = kPrefetchTable_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kWarpRows = kBlockM / kNWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte pieces per row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kStages = 2;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kKVBytes = kBlockN * kRowBytes;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes;
  // Paged only: kStages slots of kBlockN {K row, V row} entries, then (kPrefetchTable) 2 slots
  // of raw block ids.
  static constexpr int kRowTableBytes =
      kStages * kBlockN * 16 + (kPrefetchTable ? 2 * kBlockN * 4 : 0);
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0);
  static_assert(kWarpRows % 16 == 0 && kWarpRows * kNWarps == kBlockM);
  static_assert(kThreads % kChunks == 0 && kBlockM % kRowsPerPass == 0 &&
                kBlockN % kRowsPerPass == 0);
};

// The tiles the library runs (bench/gpu_prefill_bench.cu times alternatives). Each warp owns 32
// query rows, as in FlashAttention-2 (half the shared-memory traffic per MMA of 16-row warps).
// head_dim 128: the output accumulators alone take 128 registers per thread. Causal runs
// kBlockN = 64 with the block-table prefetch: it spills 8-20 bytes in the copy path, yet was the
// fastest on every shape on the H200 (NOTES "CUDA prefill" v2: +3.5% packed, +4% paged over
// the spill-free 48-key tile). Non-causal keeps 32, the widest spill-free tile.
template <int kHeadDim, bool kCausal>
struct DefaultPrefillTile;
template <bool kCausal>
struct DefaultPrefillTile<64, kCausal> {
  using type = PrefillTile<64, 128, 64, 4, 2>;
};
template <bool kCausal>
struct DefaultPrefillTile<128, kCausal> {
  using type = PrefillTile<128, 128, kCausal ? 64 : 32, 4, 2, kCausal>;
};

// The kExt tiles, by the tile's head_dim (64; 128 also runs 80 and 96; 256). 128: the 32-key
// tile (spill-free without the prefetching table). 256: 16 rows per warp (the output alone is
// 128 registers per thread), 64 x 32 tiles: Q 32 KB + two stages of K and V 64 KB = 96 KB, so
// two CTAs fit an SM's 227 KB.
template <int kTileDim>
struct ExtPrefillTile;
template <>
struct ExtPrefillTile<64> {
  using type = PrefillTile<64, 128, 64, 4, 2>;
};
template <>
struct ExtPrefillTile<128> {
  using type = PrefillTile<128, 128, 32, 4, 2>;
};
template <>
struct ExtPrefillTile<256> {
  using type = PrefillTile<256, 64, 32, 4, 2>;
};

// kFp8 (paged only): the caches hold float8_e4m3 codes. Each thread loads its 8 codes of a
// row (8 bytes) into registers, converts them exactly to T (decode_fp8.cuh) and stores the
// 16-byte piece into the same swizzled tile the 16-bit path fills with cp.async; k_scale is
// folded into the softmax scale, v_scale into the output normalisation. The register-staged
// copy waits for its loads before the tile's compute (no cp.async overlap): a first version.
template <typename T, class Tile, bool kCausal, bool kPaged, bool kFp8 = false, bool kExt = false>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(kPaged || !kFp8, "fp8 caches are paged");
  static_assert(!kExt || !kCausal, "kExt: causal is the window's right bound");
  using KV = std::conditional_t<kFp8, uint8_t, T>;  // the caches' element type
  constexpr int D = Tile::kHeadDim;
  constexpr int BM = Tile::kBlockM;
  constexpr int BN = Tile::kBlockN;
  constexpr int kMT = Tile::kMTiles;
  constexpr int kNT = BN / 8;
  constexpr int kDT = D / 8;
  constexpr int kChunks = Tile::kChunks;
  constexpr int kRowsPerPass = Tile::kRowsPerPass;
  constexpr int kRowBytes = Tile::kRowBytes;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK = sQ + Tile::kQBytes;
  const uint32_t sV = sK + Tile::kStages * Tile::kKVBytes;

  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int m_block = p.num_m_blocks - 1 - static_cast<int>(blockIdx.z);  // heaviest first
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  // ---- sequence bounds (untrusted values) ----
  const int q_begin = p.cu_seqlens_q[b];
  const int q_end = p.cu_seqlens_q[b + 1];
  const int k_begin = p.cu_seqlens_k[b];
  const int k_end = p.cu_seqlens_k[b + 1];
  const bool first_cta_of_seq = tid == 0 && h == 0 && blockIdx.z == 0;
  if (q_begin < 0 || q_end < q_begin || q_end > p.total_q || k_begin < 0 || k_end < k_begin ||
      (!kPaged && k_end > p.total_k)) {
    if (first_cta_of_seq) record_fault(p.fault_word, kFaultBadCuSeqlens);
    return;
  }
  const int Lq = q_end - q_begin;
  const int Lk = k_end - k_begin;
  if constexpr (kPaged) {
    if (static_cast<int64_t>(Lk) >
        static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
      if (first_cta_of_seq) record_fault(p.fault_word, kFaultSeqlenOutOfRange);
      return;
    }
  }
  const int m0 = m_block * BM;
  if (m0 >= Lq) return;

  // Query i sees key j iff j < Lk and (causal) j <= i + causal_offset.
  const int causal_offset = Lk - Lq;
  // Key tiles n_first .. n_first + n_blocks - 1 (n_first = 0 but with a window's left edge).
  const int key_end = kCausal ? min(Lk, min(m0 + BM, Lq) + causal_offset) : Lk;
  int n_blocks = key_end > 0 ? (key_end + BN - 1) / BN : 0;
  int n_first = 0;
  ScoreMods mods;
  if constexpr (kExt) {
    const KeyTiles tiles = prefill_key_tiles<BN>(p, m0, min(m0 + BM, Lq), Lq, Lk);
    n_first = tiles.first;
    n_blocks = tiles.count;
    mods.init<BN>(p, b, h, m0, min(m0 + BM, Lq), Lq, Lk);
  }
  // The k-th tile visited (from the last key tile down). Spelled without n_first when it is 0:
  // the plain kernels then compile to exactly the code they had before kExt (ptxas -v).
  auto tile_at = [&](int k) {
    if constexpr (kExt) {
      return n_first + n_blocks - 1 - k;
    } else {
      return n_blocks - 1 - k;
    }
  };
  // The tensors' head_dim (the head stride of q, k, v and out) and its 16-byte pieces; kExt
  // zero-fills pieces >= hd_chunks of the kHeadDim-wide tile.
  const int hd = kExt ? p.head_dim : D;
  const int hd_chunks = kExt ? hd / 8 : kChunks;

  const int kv_head = h / p.group;
  float scale = p.scale, scale_log2 = p.scale_log2, v_scale = 1.0f;
  if constexpr (kFp8) {
    if (p.k_scale != nullptr) {
      const float ks = __ldg(p.k_scale + kv_head);
      scale *= ks;
      scale_log2 *= ks;
    }
    if (p.v_scale != nullptr) v_scale = __ldg(p.v_scale + kv_head);
    if constexpr (kExt) {
      if (p.k_scale != nullptr) mods.fold_key_scale(__ldg(p.k_scale + kv_head));
    }
  }
  const T* q_ptr = static_cast<const T*>(p.q) + static_cast<int64_t>(q_begin) * p.q_stride +
                   static_cast<int64_t>(h) * hd;
  const int32_t* bt_row = kPaged ? p.block_table + static_cast<int64_t>(b) * p.bt_stride : nullptr;

  // This thread's 16-byte piece of each row it copies, and its swizzled place in a row.
  const int ld_chunk = tid % kChunks;
  const int ld_row = tid / kChunks;
  // Element column of that piece in a K/V row, and (packed) the first key row it copies. K/V
  // pointers are rebuilt from these per tile rather than kept live (register pressure).
  const int kv_col = kv_head * hd + ld_chunk * 8;
  const bool ld_chunk_ok = !kExt || ld_chunk < hd_chunks;  // kExt: a piece of the real head_dim
  const int k_row0 = kPaged ? 0 : k_begin + ld_row;
  auto swizzled = [](int row, int chunk) -> uint32_t {
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
  };

  // Paged: the element offsets of the K and V rows of a tile, resolved through the block table
  // one tile ahead of their copy by threads 0..BN-1, one row each, into a 2-slot table in shared
  // memory ({-1, 0}: zero-fill). Keeps the table walk out of the copying threads' registers.
  longlong2* row_table = reinterpret_cast<longlong2*>(smem + Tile::kSmemBytes);
  auto resolve_rows = [&](int n, int slot) {
    if (tid < BN) {
      const int j = n * BN + tid;
      longlong2 e = make_longlong2(-1, 0);
      if (j < Lk) {
        const int idx = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
        const int blk = __ldg(bt_row + idx);
        const int off = j - idx * p.block_size;
        if (blk >= 0 && blk < p.num_blocks) {
          e.x = static_cast<int64_t>(blk) * p.k_block_stride + static_cast<int64_t>(off) * p.k_stride;
          e.y = static_cast<int64_t>(blk) * p.v_block_stride + static_cast<int64_t>(off) * p.v_stride;
        } else {
          record_fault(p.fault_word, kFaultBlockOutOfRange);
        }
      }
      row_table[slot * BN + tid] = e;
    }
  };
  // Prefetching form: fetch_ids copies the block id of each row of tile n (thread tid < BN, row
  // tid) into id slot `slot` with cp.async, two tiles before its copy; resolve_ptrs (one tile
  // before the copy, after the cp.async wait: each thread reads only what it fetched) turns it
  // into the addresses of the row's K and V token rows (0: zero-fill).
  int32_t* raw_ids = reinterpret_cast<int32_t*>(smem + Tile::kSmemBytes + Tile::kStages * BN * 16);
  auto fetch_ids = [&](int n, int slot) {
    const int j = n * BN + tid;
    if (tid < BN && j < Lk) {
      const int idx = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
      ptx::cp_async_4(ptx::smem_addr(raw_ids + slot * BN + tid), bt_row + idx);
    }
  };
  auto resolve_ptrs = [&](int n, int slot, int id_slot) {
    if (tid < BN) {
      const int j = n * BN + tid;
      longlong2 e = make_longlong2(0, 0);
      if (j < Lk) {
        const int blk = raw_ids[id_slot * BN + tid];
        const int off = p.block_shift >= 0 ? j & (p.block_size - 1) : j % p.block_size;
        if (blk >= 0 && blk < p.num_blocks) {
          e.x = reinterpret_cast<long long>(
              static_cast<const KV*>(p.k) +
              (static_cast<int64_t>(blk) * p.k_block_stride + static_cast<int64_t>(off) * p.k_stride));
          e.y = reinterpret_cast<long long>(
              static_cast<const KV*>(p.v) +
              (static_cast<int64_t>(blk) * p.v_block_stride + static_cast<int64_t>(off) * p.v_stride));
        } else {
          record_fault(p.fault_word, kFaultBlockOutOfRange);
        }
      }
      row_table[slot * BN + tid] = e;
    }
  };

  // fp8: this thread's 8 codes at src (or zeros) as 8 T values into the 16 bytes at dst.
  auto stage_fp8 = [](uint32_t dst, const KV* src, bool ok) {
    uint2 raw = make_uint2(0, 0);
    if (ok) raw = __ldg(reinterpret_cast<const uint2*>(src));
    uint32_t w[4];
    // e4m3x4_to pairs bytes (0, 2) and (1, 3): permute so that they are (0, 1) and (2, 3).
    e4m3x4_to<T>(byte_perm(raw.x, 0, 0x3120u), w[0], w[1]);
    e4m3x4_to<T>(byte_perm(raw.y, 0, 0x3120u), w[2], w[3]);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3])
                 : "memory");
  };
  // K and V rows [n*BN, n*BN + BN) -> stage; keys >= Lk (and bad block ids) are zero-filled.
  auto load_kv = [&](int n, int stage) {
    const uint32_t k_dst = sK + stage * Tile::kKVBytes;
    const uint32_t v_dst = sV + stage * Tile::kKVBytes;
    if constexpr (!kPaged) {
      // One pointer per tensor, stepped row by row (keeps the register count down).
      const int j0 = n * BN + ld_row;
      const T* k_src = static_cast<const T*>(p.k) + static_cast<int64_t>(k_row0 + n * BN) * p.k_stride + kv_col;
      const T* v_src = static_cast<const T*>(p.v) + static_cast<int64_t>(k_row0 + n * BN) * p.v_stride + kv_col;
      const int64_t k_step = static_cast<int64_t>(kRowsPerPass) * p.k_stride;
      const int64_t v_step = static_cast<int64_t>(kRowsPerPass) * p.v_stride;
#pragma unroll
      for (int i = 0; i < BN / kRowsPerPass; ++i) {
        const int r = ld_row + i * kRowsPerPass;
        const bool ok = j0 + i * kRowsPerPass < Lk && ld_chunk_ok;
        const uint32_t dst = swizzled(r, ld_chunk);
        ptx::cp_async_16(k_dst + dst, k_src, ok);
        ptx::cp_async_16(v_dst + dst, v_src, ok);
        k_src += k_step;
        v_src += v_step;
      }
    } else if constexpr (Tile::kPrefetchTable) {
      const longlong2* rows = row_table + stage * BN;  // slot == stage
#pragma unroll
      for (int i = 0; i < BN / kRowsPerPass; ++i) {
        const int r = ld_row + i * kRowsPerPass;
        const longlong2 e = rows[r];
        const bool ok = e.x != 0 && ld_chunk_ok;
        const uint32_t dst = swizzled(r, ld_chunk);
        const long long col = static_cast<long long>(kv_col) * static_cast<long long>(sizeof(KV));
        if constexpr (kFp8) {
          stage_fp8(k_dst + dst, reinterpret_cast<const KV*>(e.x + col), ok);
          stage_fp8(v_dst + dst, reinterpret_cast<const KV*>(e.y + col), ok);
        } else {
          ptx::cp_async_16(k_dst + dst, reinterpret_cast<const T*>(e.x + col), ok);
          ptx::cp_async_16(v_dst + dst, reinterpret_cast<const T*>(e.y + col), ok);
        }
      }
    } else {
      const longlong2* rows = row_table + stage * BN;  // slot == stage
#pragma unroll
      for (int i = 0; i < BN / kRowsPerPass; ++i) {
        const int r = ld_row + i * kRowsPerPass;
        const longlong2 e = rows[r];
        const bool ok = e.x >= 0 && ld_chunk_ok;
        const uint32_t dst = swizzled(r, ld_chunk);
        if constexpr (kFp8) {
          stage_fp8(k_dst + dst, static_cast<const KV*>(p.k) + (ok ? e.x + kv_col : 0), ok);
          stage_fp8(v_dst + dst, static_cast<const KV*>(p.v) + (ok ? e.y + kv_col : 0), ok);
        } else {
          ptx::cp_async_16(k_dst + dst, static_cast<const T*>(p.k) + e.x + kv_col, ok);
          ptx::cp_async_16(v_dst + dst, static_cast<const T*>(p.v) + e.y + kv_col, ok);
        }
      }
    }
  };

  if (n_blocks > 0) {
    if constexpr (kPaged && Tile::kPrefetchTable) {
      fetch_ids(tile_at(0), 0);
      if (n_blocks > 1) fetch_ids(tile_at(1), 1);
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      resolve_ptrs(tile_at(0), 0, 0);
      if (n_blocks > 1) resolve_ptrs(tile_at(1), 1, 1);
      if (n_blocks > 2) fetch_ids(tile_at(2), 0);  // lands with the first tile
      __syncthreads();
    } else if constexpr (kPaged) {
      resolve_rows(tile_at(0), 0);
      if (n_blocks > 1) resolve_rows(tile_at(1), 1);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < BM / kRowsPerPass; ++i) {
      const int r = ld_row + i * kRowsPerPass;
      const bool ok = m0 + r < Lq && ld_chunk_ok;
      ptx::cp_async_16(sQ + swizzled(r, ld_chunk),
                       q_ptr + static_cast<int64_t>(m0 + r) * p.q_stride + ld_chunk * 8,
                       ok);
    }
    load_kv(tile_at(0), 0);
    ptx::cp_async_commit();
  }

  // ---- per-lane ldmatrix addressing (see ptx.cuh for the fragment layouts) ----
  const int warp_row = warp * Tile::kWarpRows;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int r8 = lane & 7;
  // Q (A operand): lanes 0-15 give rows 0-15 at chunk 2kk, lanes 16-31 the same rows at 2kk+1.
  const uint32_t q_base = sQ + (warp_row + (lane & 15)) * kRowBytes;
  const int q_x = (lane >> 4) ^ r8;
  // K (B operand of S = Q K^T): matrix i = lane / 8 covers keys (i/2)*8.. at chunk 2kk + i%2.
  const uint32_t k_row = ((lane >> 4) * 8 + r8) * kRowBytes;
  const int k_x = ((lane >> 3) & 1) ^ r8;
  // V (B operand of O = P V, transposed load): matrix i covers keys (i%2)*8.. at dims chunk
  // 2dp + i/2.
  const uint32_t v_row = (((lane >> 3) & 1) * 8 + r8) * kRowBytes;
  const int v_x = (lane >> 4) ^ r8;
  // Byte offset of chunk 2j of a swizzled row: ((2j) ^ x) * 16 = (j / 4) * 128 + ((j % 4) * 32 ^ x * 16)
  // (x < 8), an XOR with a constant per unrolled j.
  const uint32_t q_xs = static_cast<uint32_t>(q_x) << 4;
  const uint32_t k_xs = static_cast<uint32_t>(k_x) << 4;
  const uint32_t v_xs = static_cast<uint32_t>(v_x) << 4;
  auto chunk_off = [](int j, uint32_t xs) -> uint32_t {
    return static_cast<uint32_t>((j >> 2) * 128) + (static_cast<uint32_t>((j & 3) * 32) ^ xs);
  };

  float o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
    }
  }
  OnlineSoftmax<kMT> softmax;
  softmax.init();

  for (int it = 0; it < n_blocks; ++it) {
    const int n = tile_at(it);
    const int stage = it & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();  // tile `it` visible to all; everyone is done with the other stage
    if (it + 1 < n_blocks) load_kv(n - 1, stage ^ 1);
    if constexpr (kPaged && Tile::kPrefetchTable) {
      // Id slot stage ^ 1 was last read by this thread's resolve one iteration ago.
      if (it + 3 < n_blocks) fetch_ids(n - 3, stage ^ 1);
    }
    ptx::cp_async_commit();
    if constexpr (kPaged && Tile::kPrefetchTable) {
      // Row slot `stage` was last read by the copy issued before this iteration's barrier; id
      // slot `stage` (tile n - 2) landed at the wait above.
      if (it + 2 < n_blocks) resolve_ptrs(n - 2, stage, stage);
    } else if constexpr (kPaged) {
      // Slot `stage` was last read by the copy issued before this iteration's barrier.
      if (it + 2 < n_blocks) resolve_rows(n - 2, stage);
    }

    const uint32_t k_tile = sK + stage * Tile::kKVBytes;
    const uint32_t v_tile = sV + stage * Tile::kKVBytes;

    // S = Q K^T
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        ptx::ldmatrix_x4(qa[mt], q_base + mt * 16 * kRowBytes + chunk_off(kk, q_xs));
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t kb[4];
        ptx::ldmatrix_x4(kb, k_tile + np * 16 * kRowBytes + k_row + chunk_off(kk, k_xs));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          ptx::mma_16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    if constexpr (kExt) {
      mods.apply_bias(s, m0 + warp_row + g, n * BN + 2 * t);
      if (mods.tile_needs_mask(n)) mods.apply_mask(s, m0 + warp_row + g, n * BN + 2 * t);
    } else {
      const bool need_mask =
          (n + 1) * BN > Lk || (kCausal && (n + 1) * BN - 1 > m0 + causal_offset);
      if (need_mask) {
        apply_mask<kCausal>(s, m0 + warp_row + g, n * BN + 2 * t, Lk, causal_offset);
      }
    }
    softmax.update(s, o, scale_log2);

    // O += P V, P taken straight from the S accumulators (C layout == A layout per 16 keys),
    // converted all at once so the f32 scores die before the V loads start.
    uint32_t pa[BN / 16][kMT][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[kk][mt][0] = ptx::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[kk][mt][1] = ptx::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[kk][mt][2] = ptx::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[kk][mt][3] = ptx::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, v_tile + kk * 16 * kRowBytes + v_row + chunk_off(dp, v_xs));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<T>(o[mt][2 * dp], pa[kk][mt], vb[0], vb[1]);
          ptx::mma_16816<T>(o[mt][2 * dp + 1], pa[kk][mt], vb[2], vb[3]);
        }
      }
    }
  }

  // ---- epilogue: normalise, stage the warp's rows in its own rows of sQ (no other warp reads
  // them), then 16-byte coalesced stores; LSE from lane t == 0 of each quad ----
  float inv_sum[kMT][2];
  float lse[kMT][2];
  softmax.finish(inv_sum, lse, scale);
  if constexpr (kFp8) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      inv_sum[mt][0] *= v_scale;
      inv_sum[mt][1] *= v_scale;
    }
  }
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp_row + mt * 16 + hr * 8 + g;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        const uint32_t v = ptx::pack2<T>(o[mt][dt][2 * hr] * inv_sum[mt][hr],
                                         o[mt][dt][2 * hr + 1] * inv_sum[mt][hr]);
        *reinterpret_cast<uint32_t*>(smem + row * kRowBytes + ((dt ^ g) << 4) + t * 4) = v;
      }
    }
  }
  __syncwarp();
  // Re-read (not kept live through the mainloop): this sequence's first row and row count.
  const int q_first = *static_cast<const volatile int32_t*>(p.cu_seqlens_q + b);
  const int rows_left = *static_cast<const volatile int32_t*>(p.cu_seqlens_q + b + 1) - q_first - m0;
  T* o_ptr = static_cast<T*>(p.out) + static_cast<int64_t>(q_first + m0) * p.o_stride +
             static_cast<int64_t>(h) * hd;
#pragma unroll
  for (int i = 0; i < Tile::kWarpRows * kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int row = warp_row + idx / kChunks;
    const int chunk = idx % kChunks;
    if (row < rows_left && (!kExt || chunk < hd_chunks)) {
      const uint4 v = *reinterpret_cast<const uint4*>(smem + swizzled(row, chunk));
      *reinterpret_cast<uint4*>(o_ptr + static_cast<int64_t>(row) * p.o_stride + chunk * 8) = v;
    }
  }
  if (p.lse != nullptr && t == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = warp_row + mt * 16 + hr * 8 + g;
        if (row < rows_left) {
          p.lse[static_cast<int64_t>(h) * p.lse_head_stride + q_first + m0 + row] = lse[mt][hr];
        }
      }
    }
  }
}

// Launches one tile configuration on the current device.
template <typename T, class Tile, bool kCausal, bool kPaged, bool kFp8 = false, bool kExt = false>
void launch_prefill_tile(PrefillParams p, cudaStream_t stream) {
  p.num_m_blocks = (p.max_seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM;
  if (p.num_m_blocks == 0 || p.num_seqs == 0) return;
  KVATTN_CHECK(p.num_m_blocks <= 65535, "prefill_attention: max_seqlen_q (", p.max_seqlen_q,
               ") needs ", p.num_m_blocks, " row blocks but the grid allows 65535");
  KVATTN_CHECK(p.num_seqs <= 65535, "prefill_attention: num_seqs must be <= 65535 but is ",
               p.num_seqs);
  auto kernel = prefill_kernel<T, Tile, kCausal, kPaged, kFp8, kExt>;
  constexpr int kSmem = Tile::kSmemBytes + (kPaged ? Tile::kRowTableBytes : 0);
  static std::atomic<uint64_t> raised{0};
  raise_smem_limit_once(kernel, kSmem, raised, "prefill_attention");
  const dim3 grid(p.num_heads, p.num_seqs, p.num_m_blocks);
  kernel<<<grid, Tile::kThreads, kSmem, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  KVATTN_CHECK(err == cudaSuccess, "prefill_attention: kernel launch failed: ",
               cudaGetErrorString(err));
}

template <typename T, int kHeadDim, bool kCausal, bool kPaged, bool kFp8>
void launch_prefill(const PrefillParams& p, cudaStream_t stream) {
  launch_prefill_tile<T, typename DefaultPrefillTile<kHeadDim, kCausal>::type, kCausal, kPaged,
                      kFp8>(p, stream);
}

template <typename T, int kTileDim, bool kPaged, bool kFp8>
void launch_prefill_ext(const PrefillParams& p, cudaStream_t stream) {
  static_assert(kPaged || !kFp8, "fp8 caches are paged");
  launch_prefill_tile<T, typename ExtPrefillTile<kTileDim>::type, false, kPaged, kFp8, true>(
      p, stream);
}

}  // namespace kvattn::cuda
