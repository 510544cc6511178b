// The producer of the Hopper prefill kernel for small pages (EXPERIMENTAL, off by default:
// CudaTuning::prefill_sm90_paged_gather; written without a GPU, not yet run). TMA moves whole
// boxes, so a tile of 16-key pages costs eight 2 KB boxes per column block (page 16 ran at
// 0.77-0.82x of contiguous K/V, docs/perf/NOTES.md). Here the four warps of the producer
// warpgroup gather instead: thread r copies key row r of every K and V tile with 16-byte
// cp.async, swizzled by hand into the same 128-byte-swizzle layout TMA writes, resolving its
// own block id (any page size works). A load completes in three steps per thread: its
// cp.async group is waited for one load later (one load stays in flight behind the next),
// fenced to the async proxy (the wgmma reads it), then the thread arrives on the stage's full
// barrier, which counts 128 arrivals in this mode. Rows past Lk and bad block ids
// (kFaultBlockOutOfRange) are zero-filled. Q still comes by TMA.
#pragma once

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <typename T, class Tile>
struct PagedGatherProducer {
  static constexpr int BN = Tile::kBlockN;
  static constexpr int D = Tile::kHeadDim;
  static_assert(BN == 128, "one producer thread per key row of a tile");

  const PrefillSm90Params& p;
  const PrefillSmem<Tile>& s;
  int row;  // the key row of each tile this thread copies (its index in the warpgroup)
  int kv_head;
  int Lk;
  const int32_t* bt_row;  // the sequence's block-table row

  // Element offsets of this thread's K and V rows in key tile n; -1: zero-fill.
  __device__ __forceinline__ void locate(int n, int64_t& k_off, int64_t& v_off) const {
    k_off = -1;
    v_off = -1;
    const int j = n * BN + row;
    if (j >= Lk) return;
    const int idx = j / p.base.block_size;
    const int offset = j - idx * p.base.block_size;
    const int id = __ldg(bt_row + idx);
    if (id < 0 || id >= p.base.num_blocks) {
      record_fault(p.base.fault_word, kFaultBlockOutOfRange);
      return;
    }
    k_off = static_cast<int64_t>(id) * p.base.k_block_stride +
            static_cast<int64_t>(offset) * p.base.k_stride + static_cast<int64_t>(kv_head) * D;
    v_off = static_cast<int64_t>(id) * p.base.v_block_stride +
            static_cast<int64_t>(offset) * p.base.v_stride + static_cast<int64_t>(kv_head) * D;
  }

  // This thread's row of one tile: D / 8 pieces of 16 bytes, piece c of the row to column
  // block c / 8, swizzled slot (c % 8) ^ (row % 8); then the group is committed.
  __device__ __forceinline__ void copy_row(const void* base, int64_t off, uint32_t tile) const {
    const T* src = static_cast<const T*>(base) + (off >= 0 ? off : 0);
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      const uint32_t dst =
          tile + (c / 8) * BN * 128 + row * 128 + (static_cast<uint32_t>((c % 8) ^ (row % 8)) << 4);
      ptx::cp_async_16(dst, src + c * 8, off >= 0);
    }
    ptx::cp_async_commit();
  }

  // The load before the one just committed has landed: publish it on its full barrier.
  __device__ __forceinline__ static void complete_older(uint32_t bar) {
    if (bar == 0) return;
    ptx::cp_async_wait<1>();
    fence_proxy_async_smem();
    mbar_arrive(bar);
  }

  // One tile, in the order and ring slots of PrefillProducer::run (K of tile it, then V of
  // tile it - 1).
  __device__ __forceinline__ void run(int q_row0, int h, int n_blocks, uint32_t kv_base,
                                      uint32_t q_index) const {
    if (n_blocks == 0) return;
    load_q(p, s, q_row0, h, q_index, row == 0);
    uint32_t pending = 0;  // full barrier of the load still in flight behind the newest
    int64_t prev_v = -1;
    for (int it = 0; it <= n_blocks; ++it) {
      int64_t k_off = -1;
      int64_t v_off = -1;
      if (it < n_blocks) {
        const uint32_t g = kv_base + it;
        const int stage = g % Tile::kStages;
        locate(n_blocks - 1 - it, k_off, v_off);
        if (g >= Tile::kStages) mbar_wait(s.k_empty(stage), (g / Tile::kStages - 1) & 1);
        copy_row(p.base.k, k_off, s.k(stage));
        complete_older(pending);
        pending = s.k_full(stage);
      }
      if (it > 0) {
        const uint32_t g = kv_base + it - 1;
        const int stage = g % Tile::kStages;
        if (g >= Tile::kStages) mbar_wait(s.v_empty(stage), (g / Tile::kStages - 1) & 1);
        copy_row(p.base.v, prev_v, s.v(stage));
        complete_older(pending);
        pending = s.v_full(stage);
      }
      prev_v = v_off;
    }
    ptx::cp_async_wait<0>();
    fence_proxy_async_smem();
    mbar_arrive(pending);
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
