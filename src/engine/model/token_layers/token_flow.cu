// The three-phase token kernel: token_layers.cu's five phases a layer with two of their four
// grid barriers replaced (docs/notes/single-stream-decode.md, session 35).
//   A  input norm (the down projection's fixed-point sum added) + the CTA's qkv rows
//   B  attention pieces, each counted on its KV head's arrival counter; each CTA then waits for
//      the one head its o_proj share needs, merges that query head's pieces itself and adds
//      query head qh's columns times the merged row into the o_proj sum (split-K)
//   D  post norm (the o_proj sum added) + the CTA's gate_up features with SiLU * up, kept in
//      shared memory, times the down projection's columns of those features, added into the
//      down sum (split-K)
// So the barriers between B and C (the merge) and between D and E (the down projection) are
// gone; the sums are fixed point (token_flow.cuh), so the result does not depend on the order
// the CTAs add in.
//
// Slabs (slot 0: qkv, gate_up; slot 1: the o_proj share, the down share):
//   A: issue the o_proj share (boxes of the o map) -> slot 1; zero the o_proj sum (last CTA);
//      norm; wait slot 0 (qkv)
//   B: issue gate_up -> slot 0; zero the down sum (last CTA); stage the post norm's weight;
//      attention; arrive; wait for the head's pieces and merge it; wait slot 1; o_proj share;
//      issue the down share (boxes of the down map) -> slot 1
//   D: norm; wait slot 0 (gate_up); SiLU * up; issue the next qkv -> slot 0 and stage the next
//      layer's small inputs (TokenCta::stage_next); wait slot 1; down share
// After the last layer CTA 0 writes the down sum into p.o as bf16 (token_layers.h's contract).
#ifdef KVATTN_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/model/token_layers/grid_barrier.cuh"
#include "engine/model/token_layers/token_attention.cuh"
#include "engine/model/token_layers/token_cta.cuh"
#include "engine/model/token_layers/token_flow.cuh"
#include "engine/model/token_layers/token_gemv.cuh"
#include "engine/model/token_layers/token_params.cuh"

namespace kvattn::cuda_model::token {
namespace {

template <int D, int G>
__global__ void __launch_bounds__(kThreads, 1)
    token_flow_kernel(const __grid_constant__ FlowParams fp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const Params& p = fp.p;
  extern __shared__ __align__(1024) uint8_t smem[];
  TokenCta<D> c(p, smem);
  float* act = reinterpret_cast<float*>(smem + p.off_act);
  const int H = p.hidden, I = p.inter;
  const RowRange r_qkv = row_range(p.qkv_dim, p.rows_qkv);
  const RowRange r_gu = row_range(I, p.rows_gate_up);  // features = the down share's columns
  const int cols = p.rows_gate_up;                     // a multiple of 8
  const OUnit ou = o_unit(p);
  const bool attends = c.pc.items > 0;  // L > 0: every KV head has pieces and one merge
  const int o_boxes = (ou.nr + p.o_box_rows - 1) / p.o_box_rows;
  const auto o_box_bytes = static_cast<uint32_t>(p.o_box_rows * D * 2);
  const int down_boxes = r_gu.count > 0 ? (H + p.down_box_rows - 1) / p.down_box_rows : 0;
  const auto down_box_bytes = static_cast<uint32_t>(p.down_box_rows * cols * 2);
  const bool zeroes = blockIdx.x == gridDim.x - 1;
  const FixedSum o_sum{p.acc, p.acc_bad};
  const FixedSum down_sum{p.acc + H, p.acc_bad + 1};
  // Thread 0: the arrival counter of the KV head its o_proj share waits for, as the launch
  // began (it only grows; token_flow.cuh).
  unsigned arrived_base = 0;
  if (c.lead && ou.nr > 0) arrived_base = ld_acquire_gpu(p.arrived + ou.qh / p.group);
  c.start(p, r_qkv);
  TokenLayer w = p.layers[0];
  for (int l = 0; l < p.num_layers; ++l) {
    // ---- A: input norm + qkv ----
    stamp(p, l, kStampA0);
    if (c.lead) issue_boxes(c.s1, &fp.maps[l].o, ou.qh * D, ou.r0, o_boxes, p.o_box_rows, o_box_bytes);
    if (zeroes) o_sum.zero(H);  // read in the previous layer's phase D, added to in phase B
    if (l == 0) {
      norm_stage_add(c.xc, NoAdd{}, c.nw_in, p.eps, H, nullptr, c.xs, c.red);
    } else {
      norm_stage_add(c.xc, AddFixed(down_sum), c.nw_in, p.eps, H, blockIdx.x == 0 ? c.xn : nullptr,
                 c.xs, c.red);
    }
    c.finish_phase_a(p, w, l, r_qkv);
    // ---- B: attention, the merges, the o_proj shares ----
    stamp(p, l, kStampB0);
    c.issue_gate_up(p, w, r_gu);
    if (zeroes) down_sum.zero(H);  // read in phase A, added to in phase D
    stage_weights(c.nw_post, w.post_norm, H);
    attention_items<D, G>(p, w, c.L, c.pc, c.att, l, c.ahead);
    stamp(p, l, kStampB2);
    arrive(p, c.pc);
    stamp(p, l, kStampC0);
    const bool o_share = attends && ou.nr > 0;  // L = 0: attention and o_proj are zero
    if (o_share) {  // head qh's pieces, merged by this CTA into xs (bf16 [D])
      wait_arrivals(p, ou.qh / p.group, arrived_base,
                    static_cast<unsigned>((l + 1) * c.pc.pieces));
      merge_pieces<D>(p, c.pc, ou.qh, 1, reinterpret_cast<bf16*>(c.xs), c.att);
    }
    stamp(p, l, kStampC1);
    c.s1.wait();
    stamp(p, l, kStampC2);
    if (o_share) {
      gemv_rows_to(c.slab1, c.xs, D, ou.nr,
                   [&](int row, float sum) { o_sum.add(ou.r0 + row, sum); });
    }
    stamp(p, l, kStampC3);
    __syncthreads();  // every warp's reads of slot 1 come before its refill
    if (c.lead) issue_boxes(c.s1, &fp.maps[l].down, r_gu.first, 0, down_boxes, p.down_box_rows, down_box_bytes);
    grid_barrier(p.barrier);
    // ---- D: residual + post norm + gate_up + the down shares ----
    stamp(p, l, kStampD0);
    norm_stage_add(c.xc, AddFixed(o_sum), c.nw_post, p.eps, H, blockIdx.x == 0 ? c.xn : nullptr,
               c.xs, c.red);
    stamp(p, l, kStampD1);
    c.s0.wait();
    stamp(p, l, kStampD2);
    gate_up_rows_to(c.slab0, c.xs, H, r_gu.count, [&](int j, bf16 v) { act[j] = f(v); });
    for (int j = r_gu.count + threadIdx.x; j < cols; j += kThreads) act[j] = 0.0f;
    __syncthreads();  // act is complete; slot 0's reads are done
    stamp(p, l, kStampD3);
    stamp(p, l, kStampE0);  // (no phase E: its stamps mark the down share's steps)
    c.swap_residual();
    TokenLayer next = w;
    if (l + 1 < p.num_layers) {
      next = p.layers[l + 1];
      if (c.lead) c.s0.issue(next.wqkv, nullptr, r_qkv.first, r_qkv.count, H);
      c.stage_next(p, next);
    }
    stamp(p, l, kStampE1);
    c.s1.wait();
    stamp(p, l, kStampE2);
    if (r_gu.count > 0) down_partial(c.slab1, act, cols, H, down_sum);
    stamp(p, l, kStampE3);
    grid_barrier(p.barrier);  // after the last layer too: p.o is written from the whole sum
    stamp(p, l, kStampEnd);
    w = next;
  }
  if (blockIdx.x == 0) {
    const bool bad = __ldcg(down_sum.bad) != 0u;
    for (int i = threadIdx.x; i < H; i += kThreads) {
      p.o[i] = bad ? __float2bfloat16(__int_as_float(0x7fc00000)) : __float2bfloat16(fixed_value(__ldcg(down_sum.v + i)));
    }
  }
  if (p.wall != nullptr && blockIdx.x == 0 && c.lead) p.wall[1] = globaltimer();
#endif
}

}  // namespace

FlowKernel flow_kernel_for(int d, int g) {
  return instantiate(d, g, [](auto dd, auto gg) -> FlowKernel {
    return token_flow_kernel<decltype(dd)::value, decltype(gg)::value>;
  });
}

}  // namespace kvattn::cuda_model::token

#endif  // KVATTN_WITH_CUDA
