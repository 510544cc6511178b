// The Hopper (sm_90a) prefill kernel: FlashAttention-3's structure on TMA, mbarriers and wgmma.
//
// Work: one CTA per (query head, sequence, block of kBlockM query rows); blockIdx.z runs over the
// row blocks from the last (the most causal key tiles) to the first, so the heavy CTAs start
// first. Heads of one GQA group are neighbours in blockIdx.x and share their K/V tiles in L2.
// Roles: warpgroup 0 is the producer (one warp issues every TMA load, the registers of the
// rest are given to the consumers with setmaxnreg); warpgroups 1.. each compute 64 of the
// kBlockM rows (prefill_sm90_consumer.cuh) and store them (prefill_sm90_epilogue.cuh). K/V tiles
// of kBlockN keys flow through a ring of full/empty mbarriers (prefill_sm90_smem.cuh); the tile
// shapes are in prefill_sm90_params.h.
// Semantics are those of the sm_80 kernel (prefill_kernel.cuh): bottom-right causal alignment,
// untrusted lengths and block ids checked and reported through the fault word.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_consumer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_epilogue.cuh"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

template <typename T, class Tile, bool kCausal, bool kPaged>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillSm90Params sp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kHeadDim = Tile::kHeadDim;
  constexpr int BM = Tile::kBlockM;
  constexpr int BN = Tile::kBlockN;
  const PrefillParams& p = sp.base;

  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int m_block = p.num_m_blocks - 1 - static_cast<int>(blockIdx.z);

  // ---- sequence bounds (untrusted values) ----
  const int q_begin = p.cu_seqlens_q[b];
  const int q_end = p.cu_seqlens_q[b + 1];
  const int k_begin = p.cu_seqlens_k[b];
  const int k_end = p.cu_seqlens_k[b + 1];
  const bool first_cta_of_seq = threadIdx.x == 0 && h == 0 && blockIdx.z == 0;
  if (q_begin < 0 || q_end < q_begin || q_end > p.total_q || k_begin < 0 || k_end < k_begin ||
      (!kPaged && k_end > p.total_k)) {
    if (first_cta_of_seq) record_fault(p.fault_word, kFaultBadCuSeqlens);
    return;
  }
  const int Lq = q_end - q_begin;
  const int Lk = k_end - k_begin;
  if constexpr (kPaged) {
    if (static_cast<int64_t>(Lk) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
      if (first_cta_of_seq) record_fault(p.fault_word, kFaultSeqlenOutOfRange);
      return;
    }
  }
  const int m0 = m_block * BM;
  if (m0 >= Lq) return;

  // Query i sees key j iff j < Lk and (causal) j <= i + causal_offset.
  const int causal_offset = Lk - Lq;
  const int key_end = kCausal ? min(Lk, min(m0 + BM, Lq) + causal_offset) : Lk;
  const int n_blocks = key_end > 0 ? (key_end + BN - 1) / BN : 0;

  extern __shared__ unsigned char smem_raw[];
  const sm90::PrefillSmem<Tile> smem((ptx::smem_addr(smem_raw) + 1023) & ~1023u);
  if (threadIdx.x == 0) {
    sm90::prefetch_tensor_map(&sp.tmap_q);
    sm90::prefetch_tensor_map(&sp.tmap_k);
    sm90::prefetch_tensor_map(&sp.tmap_v);
    smem.init_barriers();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Tile::kProducerRegs>();
    if (threadIdx.x < 32) {
      const sm90::PrefillProducer<Tile, kPaged> producer{
          sp, smem, static_cast<int>(threadIdx.x), h / p.group, k_begin, Lk,
          kPaged ? p.block_table + static_cast<int64_t>(b) * p.bt_stride : nullptr};
      producer.run(q_begin + m0, h, n_blocks);
    }
  } else {
    sm90::setmaxnreg_inc<Tile::kConsumerRegs>();
    const int wg = warpgroup - 1;
    const int row0 = m0 + wg * 64;
    sm90::PrefillConsumer<T, Tile, kCausal> consumer;
    consumer.run(sp, smem, wg, row0, Lk, causal_offset, n_blocks);
    sm90::store_output<T, kHeadDim>(p, consumer.o, consumer.softmax, h, q_begin, row0, Lq);
  }
#endif
}

}  // namespace kvattn::cuda
