// The Hopper (sm_90a) prefill kernel: FlashAttention-3's structure on TMA, mbarriers and wgmma.
//
// Work: tiles of (query head, sequence, block of kBlockM query rows), heavy tiles first, dealt
// to the CTAs in a snake order (prefill_sm90_schedule.cuh): one tile each, or persistent (grid =
// SM count) so that one tile's epilogue overlaps the next tile's loads; with sp.tile_counter
// (the handover form) the producer claims each next tile as its CTA frees up instead.
// Roles: warpgroup 0 is the producer (one warp issues every TMA load, up to four the boxes of
// small pages, or all four gather them with cp.async; its spare registers go to the consumers
// with setmaxnreg); warpgroups
// 1.. each compute 64 of the kBlockM rows (prefill_sm90_consumer.cuh) and store them
// (prefill_sm90_epilogue.cuh). K/V tiles of kBlockN keys flow through a ring of full/empty
// mbarriers (prefill_sm90_smem.cuh); the tile shapes are in prefill_sm90_params.h.
// Semantics are those of the sm_80 kernel (prefill_kernel.cuh): bottom-right causal alignment,
// untrusted lengths and block ids checked and reported through the fault word.
// kMods: window, softcap and ALiBi with the ext kernel's semantics (prefill_mask.cuh; causal is
// the window's right bound 0, so kCausal is false): producer and consumers take the same key
// tile range per tile from the schedule (finish_tile). The plain kernels (kMods = false) keep
// their code: everything kMods adds is behind `if constexpr`.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/hopper/prefill_sm90_consumer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_epilogue.cuh"
#include "kernels/cuda/hopper/prefill_sm90_gather.cuh"
#include "kernels/cuda/hopper/prefill_sm90_params.h"
#include "kernels/cuda/hopper/prefill_sm90_producer.cuh"
#include "kernels/cuda/hopper/prefill_sm90_schedule.cuh"
#include "kernels/cuda/hopper/prefill_sm90_smem.cuh"
#include "kernels/cuda/hopper/prefill_sm90_tile_handover.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

template <typename T, class Tile, bool kCausal, bool kPaged, bool kMods = false>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillSm90Params sp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = Tile::kBlockM;
  constexpr int BN = Tile::kBlockN;
  const PrefillParams& p = sp.base;

  extern __shared__ unsigned char smem_raw[];
  // The 1024-aligned base. ptxas otherwise rematerialises it at every use (S2UR of the CTA's
  // cluster rank, ULEA, UIADD3, ULOP3, MOV: 5-6 instructions a key tile in the d128 loop,
  // session 26's lead 2); passed through a shuffle, whose result it does not recompute, it is
  // computed once and kept (H100, session 45, three rounds: 1x16384 d128 by graph 633-640 ->
  // 650-652 TFLOP/s). Only where a register is free for it: the plain head_dim 128 kernels
  // (sm_90a, ptxas of CUDA 13: no spills); at 64 and 256 and with kMods it spilled. (Session
  // 46: the unpaged head_dim 64 kernels keep it without spills, but their key loop already holds
  // the base in uniform registers, so it saves ~8 instructions outside the loop: not taken.)
  const uint32_t aligned_base = (ptx::smem_addr(smem_raw) + 1023) & ~1023u;
  constexpr bool kPinnedBase = Tile::kHeadDim == 128 && !kMods;
  const sm90::PrefillSmem<Tile> smem(kPinnedBase ? __shfl_sync(0xffffffffu, aligned_base, 0)
                                                 : aligned_base);
  if (threadIdx.x == 0) {
    sm90::prefetch_tensor_map(&sp.tmap_q);
    sm90::prefetch_tensor_map(&sp.tmap_k);
    sm90::prefetch_tensor_map(&sp.tmap_v);
    smem.init_barriers(kPaged && sp.kv_gather != 0);
  }
  __syncthreads();

  // Both roles walk the same tile list (prefill_sm90_schedule.cuh); the producers skip tiles
  // whose rows see no key.
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Tile::kProducerRegs>();
    // The experimental cp.async gather is not built with kMods (its 32-register warps would
    // spill at head_dim 64) nor for tiles other than 128 keys (head_dim 256); the launcher
    // never asks for it there.
    if constexpr (kPaged && !kMods && BN == 128 && !Tile::kProducerDecode) {
      if (sp.kv_gather != 0) {  // all four warps gather (prefill_sm90_gather.cuh)
        sm90::for_each_tile<BM, BN, kCausal, kPaged, false>(
            sp, false,
            [&](const sm90::PrefillTileWork& w, uint32_t kv, uint32_t qi) {
              const sm90::PagedGatherProducer<T, Tile> gather{
                  sp, smem, static_cast<int>(threadIdx.x), w.h / p.group, w.Lk,
                  p.block_table + static_cast<int64_t>(w.b) * p.bt_stride};
              gather.run(w.q_begin + w.m0, w.h, w.n_blocks, kv, qi);
            });
        return;
      }
    }
    using Producer = sm90::PrefillProducer<Tile, kPaged, kMods>;
    const int producer_warps = Producer::kMultiWarp ? sp.kv_producer_warps : 1;
    if (threadIdx.x >= 32 * producer_warps) return;
    // with_q false: the tile handover (warp 0) loaded the tile's Q already.
    auto load = [&](const sm90::PrefillTileWork& w, uint32_t kv, uint32_t qi, bool with_q) {
      Producer producer{sp, smem, w.h / p.group, w.k_begin, w.Lk,
          kPaged ? p.block_table + static_cast<int64_t>(w.b) * p.bt_stride : nullptr};
      if constexpr (kMods) {
        producer.n_first = w.n_first;
        producer.lo_key = w.key_lo;
        producer.hi_key = w.key_hi;
      }
      producer.run(w.q_begin + w.m0, w.h, w.n_blocks, kv, qi, with_q);
    };
    if constexpr (Tile::kProducerDecode) {
      // Warp 0 decides the tiles (with sp.tile_counter, as it frees up); further producer
      // warps walk the static list below, so the launcher claims tiles only with one.
      if (threadIdx.x < 32) {
        sm90::hand_over_tiles<Tile, kCausal, kPaged, kMods>(
            sp, smem, [&](const sm90::PrefillTileWork& w, uint32_t kv, uint32_t qi) {
              load(w, kv, qi, false);
            });
        return;
      }
    }
    sm90::for_each_tile<BM, BN, kCausal, kPaged, kMods>(
        sp, false, [&](const sm90::PrefillTileWork& w, uint32_t kv, uint32_t qi) {
          load(w, kv, qi, true);
        });
  } else {
    sm90::setmaxnreg_inc<Tile::kConsumerRegs>();
    const int wg = warpgroup - 1;
    using Consumer = sm90::PrefillConsumer<T, Tile, kCausal, kMods>;
    if (Consumer::turns_across_tiles(sp)) Consumer::prime_turns(wg);  // once per CTA
    auto consume = [&](const sm90::PrefillTileWork& w, uint32_t kv, uint32_t qi) {
      const int row0 = w.m0 + wg * 64;
      sm90::PrefillConsumer<T, Tile, kCausal, kMods> consumer;
      if constexpr (kMods) {
        consumer.run(sp, smem, wg, row0, w.Lk, w.causal_offset, w.n_blocks, kv, qi,
                     w.n_first, w.b, w.h, w.Lq);
      } else {
        consumer.run(sp, smem, wg, row0, w.Lk, w.causal_offset, w.n_blocks, kv, qi);
      }
      if constexpr (Tile::kSmemEpilogue) {
        if (sp.out_vec16 != 0) {
          sm90::store_output_staged<T, Tile::kHeadDim, Tile::kOStageRowBytes>(
              p, consumer.o, consumer.softmax, w.h, w.q_begin, row0, w.Lq,
              smem.o_stage((static_cast<int>(threadIdx.x) - 128) >> 5));
          return;
        }
      }
      sm90::store_output<T, Tile::kHeadDim>(p, consumer.o, consumer.softmax, w.h,
                                            w.q_begin, row0, w.Lq);
    };
    if constexpr (Tile::kProducerDecode) {
      sm90::for_each_handed_tile<Tile>(smem, consume);
    } else {
      sm90::for_each_tile<BM, BN, kCausal, kPaged, kMods, /*kNarrow=*/true,
                          Tile::kConsumerLookAhead>(
          sp, threadIdx.x == 128, consume);
    }
  }
#endif
}

}  // namespace kvattn::cuda
