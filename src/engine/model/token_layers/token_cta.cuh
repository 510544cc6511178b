// What both token kernels (token_layers.cu's five phases, token_flow.cu's three) keep per CTA:
// the shared-memory areas, the two weight slabs, the step's attention pieces and the CTA's
// first item, the residual's two buffers; and what they do before the first layer and when
// they stage the next layer's small inputs.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/model/token_layers/grid_barrier.cuh"
#include "engine/model/token_layers/token_attention.cuh"
#include "engine/model/token_layers/token_gemv.cuh"
#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda_model::token {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int D>
struct TokenCta {
  using S = AttSmem<D>;
  uint4* xs;
  const uint4* slab0;
  const uint4* slab1;
  uint8_t* att;
  float* red;
  bf16* nw_in;
  bf16* nw_post;
  bf16* qk_norms;
  bf16* kr;
  bf16* vr;
  int* blocks;
  WeightSlab s0, s1;
  bool lead;
  int L;
  Pieces pc;
  // The CTA's first attention item (KV head fh, keys [fk0, fk1)) and its first round [fk0,
  // fr1); `ahead`: that round is copied before phase B (Params::prefetch).
  bool first_item, ahead;
  int fh, fk0, fk1, fr1;
  // The residual: xc the current one, xn the buffer CTA 0 writes the next into.
  const bf16* xc;
  bf16* xn;

  // Carves shared memory and initialises the slabs' mbarriers (the block synchronises).
  __device__ __forceinline__ TokenCta(const Params& p, uint8_t* smem) {
    auto* bars = reinterpret_cast<uint64_t*>(smem);
    xs = reinterpret_cast<uint4*>(smem + p.off_xs);
    slab0 = reinterpret_cast<const uint4*>(smem + p.off_slab0);
    slab1 = reinterpret_cast<const uint4*>(smem + p.off_slab1);
    att = smem + p.off_att;
    red = reinterpret_cast<float*>(smem + p.off_red);
    nw_in = reinterpret_cast<bf16*>(smem + p.off_norm);
    nw_post = nw_in + p.hidden;
    qk_norms = reinterpret_cast<bf16*>(att + S::kQkNorm);
    kr = reinterpret_cast<bf16*>(att + S::kUnion);
    vr = kr + kRoundKeys * D;
    blocks = reinterpret_cast<int*>(att + S::kBlocks);
    s0 = WeightSlab{cuda::ptx::smem_addr(bars), cuda::ptx::smem_addr(slab0), 0u};
    s1 = WeightSlab{cuda::ptx::smem_addr(bars + 1), cuda::ptx::smem_addr(slab1), 0u};
    lead = threadIdx.x == 0;
    if (lead) {
      cuda::sm90::mbar_init(s0.bar, 1);
      cuda::sm90::mbar_init(s1.bar, 1);
      cuda::sm90::fence_barrier_init();
    }
    __syncthreads();
    L = max(0, __ldg(p.context_len));
    pc = plan_pieces(p, L);
    first_item = static_cast<int>(blockIdx.x) < pc.items;
    fh = first_item ? static_cast<int>(blockIdx.x) / pc.pieces : 0;
    fk0 = first_item ? min(L, (static_cast<int>(blockIdx.x) - fh * pc.pieces) * pc.chunk) : 0;
    fk1 = first_item ? min(L, fk0 + pc.chunk) : 0;
    fr1 = min(fk1, fk0 + kRoundKeys);
    ahead = first_item && p.prefetch != 0;
    xc = p.x;
    xn = p.x2;
  }

  // Before the first layer: layer 0's qkv rows `r_qkv` to slab 0, the RoPE table, the first
  // round's block ids and (prefetch 2) its K/V rows, layer 0's norm weights.
  __device__ __forceinline__ void start(const Params& p, RowRange r_qkv) {
    if (p.wall != nullptr && blockIdx.x == 0 && lead) p.wall[0] = globaltimer();
    if (lead) s0.issue(p.layers[0].wqkv, nullptr, r_qkv.first, r_qkv.count, p.hidden);
    rope_table<D>(p, att);
    if (first_item) first_round_blocks(p, fk0, fr1, blocks);
    if (ahead && p.prefetch == 2) {
      __syncthreads();  // blocks
      load_round<D>(p, p.layers[0], fh, fk0, fr1, L, kr, vr, blocks);
    }
    stage_weights(nw_in, p.layers[0].input_norm, p.hidden);
    stage_qk_norms(p.layers[0]);
  }

  __device__ __forceinline__ void stage_qk_norms(const TokenLayer& w) {
    if (w.q_norm != nullptr) {
      stage_weights(qk_norms, w.q_norm, D);
      stage_weights(qk_norms + D, w.k_norm, D);
    }
  }

  // The next layer's input norm weights, (prefetch 2) its first K/V round, its q / k norm
  // weights, by cp.async, in the last phase of a layer (after that phase's last use of them).
  __device__ __forceinline__ void stage_next(const Params& p, const TokenLayer& next) {
    stage_weights(nw_in, next.input_norm, p.hidden);
    if (ahead && p.prefetch == 2) load_round<D>(p, next, fh, fk0, fr1, L, kr, vr, blocks);
    stage_qk_norms(next);
  }

  // Phase A after its norm (xs holds the normed input): (prefetch 1) the layer's first K/V
  // round, the CTA's qkv rows `r_qkv`, the residual swapped (from layer 1 on: CTA 0 wrote the
  // sum in the norm), then the grid barrier.
  __device__ __forceinline__ void finish_phase_a(const Params& p, const TokenLayer& w, int l,
                                                 RowRange r_qkv) {
    if (ahead && p.prefetch == 1) load_round<D>(p, w, fh, fk0, fr1, L, kr, vr, blocks);
    stamp(p, l, kStampA1);
    s0.wait();
    stamp(p, l, kStampA2);
    gemv_rows(slab0, xs, p.hidden, r_qkv, p.qkv);
    stamp(p, l, kStampA3);
    if (l > 0) swap_residual();
    grid_barrier(p.barrier);
  }

  // Thread 0, at phase B's start: the gate and up rows of the CTA's features `r_gu` -> slab 0.
  __device__ __forceinline__ void issue_gate_up(const Params& p, const TokenLayer& w,
                                                RowRange r_gu) {
    if (lead) {
      const auto* gu = static_cast<const bf16*>(w.wgate_up);
      s0.issue(gu, gu + int64_t{p.inter} * p.hidden, r_gu.first, r_gu.count, p.hidden);
    }
  }

  // CTA 0 wrote the next residual into xn: it becomes the current one.
  __device__ __forceinline__ void swap_residual() {
    const bf16* t = xc;
    xc = xn;
    xn = const_cast<bf16*>(t);
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda_model::token
