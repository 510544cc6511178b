// The token kernel (token_layers.h): the phase sequence of each layer, and its plan and launch.
#ifdef KVATTN_WITH_CUDA

#include "engine/model/token_layers/token_layers.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "engine/model/token_layers/grid_barrier.cuh"
#include "engine/model/token_layers/token_attention.cuh"
#include "engine/model/token_layers/token_cta.cuh"
#include "engine/model/token_layers/token_gemv.cuh"
#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/hopper/tensor_map.h"
#include "kvattn/core/error.h"
#include "kernels/cuda/pdl_launch.h"

namespace kvattn::cuda_model {
namespace token {
namespace {

// Phase order and the weight slabs' schedule (slot 0: qkv, gate_up; slot 1: o_proj, down):
//   A: issue o_proj -> slot 1; input norm; wait slot 0 (qkv)
//   B: issue gate_up -> slot 0; attention pieces
//   C: stage the post norm's weight; merge; wait slot 1 (o_proj)
//   D: issue down -> slot 1; residual + post norm; wait slot 0 (gate_up)
//   E: issue the next layer's qkv -> slot 0, stage its input and q/k norm weights and copy its
//      first K/V round (Params::prefetch 2, the default); stage act; wait slot 1 (down)
// Each issue follows the CTA's last read of that buffer's previous slab across a grid barrier.
// The norm weights are staged by cp.async a phase ahead; norm_stage waits for every copy in
// flight, which by then are only those (and the K/V round, issued a phase earlier: copies
// still in flight at a grid barrier would hold the CTA's arrival back). The RoPE table of the
// token's position and the first round's block ids are computed once, before the first layer.
template <int D, int G>
__global__ void __launch_bounds__(kThreads, 1) token_layers_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  TokenCta<D> c(p, smem);
  const int H = p.hidden, I = p.inter, QD = p.nh * D;
  const RowRange r_qkv = row_range(p.qkv_dim, p.rows_qkv);
  const RowRange r_o = row_range(H, p.rows_o);
  const RowRange r_gu = row_range(I, p.rows_gate_up);
  const RowRange r_down = row_range(H, p.rows_down);
  c.start(p, r_qkv);
  TokenLayer w = p.layers[0];
  for (int l = 0; l < p.num_layers; ++l) {
    // ---- A: input norm + qkv ----
    stamp(p, l, kStampA0);
    if (c.lead) c.s1.issue(w.wo, nullptr, r_o.first, r_o.count, QD);
    norm_stage(c.xc, l == 0 ? nullptr : p.o, c.nw_in, p.eps, H,
               l > 0 && blockIdx.x == 0 ? c.xn : nullptr, c.xs, c.red);
    c.finish_phase_a(p, w, l, r_qkv);
    // ---- B: attention pieces ----
    stamp(p, l, kStampB0);
    c.issue_gate_up(p, w, r_gu);
    attention_items<D, G>(p, w, c.L, c.pc, c.att, l, c.ahead);
    stamp(p, l, kStampB2);
    grid_barrier(p.barrier);
    // ---- C: merge + o_proj ----
    stamp(p, l, kStampC0);
    stage_weights(c.nw_post, w.post_norm, H);
    merge_pieces<D>(p, c.pc, 0, p.nh, reinterpret_cast<bf16*>(c.xs), c.att);
    stamp(p, l, kStampC1);
    c.s1.wait();
    stamp(p, l, kStampC2);
    gemv_rows(c.slab1, c.xs, QD, r_o, p.o);
    stamp(p, l, kStampC3);
    grid_barrier(p.barrier);
    // ---- D: residual + post-attention norm + gate_up ----
    stamp(p, l, kStampD0);
    if (c.lead) c.s1.issue(w.wdown, nullptr, r_down.first, r_down.count, I);
    norm_stage(c.xc, p.o, c.nw_post, p.eps, H, blockIdx.x == 0 ? c.xn : nullptr, c.xs, c.red);
    stamp(p, l, kStampD1);
    c.s0.wait();
    stamp(p, l, kStampD2);
    gate_up_rows(c.slab0, c.xs, H, r_gu, p.act);
    stamp(p, l, kStampD3);
    c.swap_residual();
    grid_barrier(p.barrier);
    // ---- E: down ----
    stamp(p, l, kStampE0);
    TokenLayer next = w;
    if (l + 1 < p.num_layers) {
      next = p.layers[l + 1];
      if (c.lead) c.s0.issue(next.wqkv, nullptr, r_qkv.first, r_qkv.count, H);
      c.stage_next(p, next);
    }
    stage_plain(p.act, I, c.xs);
    stamp(p, l, kStampE1);
    c.s1.wait();
    stamp(p, l, kStampE2);
    gemv_rows(c.slab1, c.xs, I, r_down, p.o);
    stamp(p, l, kStampE3);
    if (l + 1 < p.num_layers) grid_barrier(p.barrier);
    stamp(p, l, kStampEnd);
    w = next;
  }
  if (p.wall != nullptr && blockIdx.x == 0 && c.lead) p.wall[1] = globaltimer();
#endif
}

}  // namespace

Kernel kernel_for(int d, int g) {
  return instantiate(d, g, [](auto dd, auto gg) -> Kernel {
    return token_layers_kernel<decltype(dd)::value, decltype(gg)::value>;
  });
}

}  // namespace token

TokenLayersPlan token_layers_plan(const TokenShape& s, int device, bool flow) {
  int major = 0, sms = 0, coop = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TokenLayersPlan plan = token_layers_layout(s, sms, static_cast<size_t>(optin), flow);
  auto no = [&](std::string why) {
    plan.ok = false;
    plan.why_not = std::move(why);
    return plan;
  };
  if (!plan.ok) return plan;
  if (major != 9) return no("not an sm_90 device");
  if (coop == 0) return no("no cooperative launch");
  const int D = s.head_dim, g = s.num_heads / s.num_kv_heads;
  const void* kernel = flow ? reinterpret_cast<const void*>(token::flow_kernel_for(D, g))
                            : reinterpret_cast<const void*>(token::kernel_for(D, g));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(plan.smem_bytes)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, token::kThreads,
                                                           plan.smem_bytes));
  if (per_sm < 1) return no("the kernel does not fit an SM");
  return plan;
}

void token_layers(const TokenShape& s, const TokenLayersPlan& plan, const TokenLayersArgs& a,
                  cudaStream_t stream) {
  token::Params p{};
  p.layers = a.layers;
  p.num_layers = s.num_layers;
  p.hidden = s.hidden;
  p.nh = s.num_heads;
  p.nkv = s.num_kv_heads;
  p.group = s.num_heads / s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.inter = s.inter;
  p.qkv_dim = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
  p.eps = s.eps;
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.scale_log2 = scale * 1.4426950408889634f;
  p.inv_freq = s.inv_freq;
  p.rope_base = s.inv_freq != nullptr ? 0.0f : s.theta;
  p.attention_factor = s.attention_factor;
  p.rotary_dim = s.rotary_dim == 0 ? s.head_dim : s.rotary_dim;
  p.interleaved = s.interleaved ? 1 : 0;
  p.position = a.position;
  p.slot = a.slot;
  p.context_len = a.context_len;
  p.block_table = a.block_table;
  p.table_width = a.table_width;
  p.block_size = a.block_size;
  p.num_blocks = a.num_blocks;
  p.x = static_cast<__nv_bfloat16*>(a.x);
  p.x2 = static_cast<__nv_bfloat16*>(a.x2);
  p.o = static_cast<__nv_bfloat16*>(a.o);
  p.qkv = static_cast<__nv_bfloat16*>(a.qkv);
  p.act = static_cast<__nv_bfloat16*>(a.act);
  p.workspace = a.workspace;
  p.barrier = a.barrier;
  p.fault_word = a.fault_word;
  p.rows_qkv = plan.rows_qkv;
  p.rows_o = plan.rows_o;
  p.rows_gate_up = plan.rows_gate_up;
  p.rows_down = plan.rows_down;
  p.max_pieces = plan.max_pieces;
  p.prefetch = a.prefetch;
  p.stamps = a.stamps;
  p.wall = a.wall;
  p.off_xs = static_cast<uint32_t>(plan.off_xs);
  p.off_slab0 = static_cast<uint32_t>(plan.off_slab0);
  p.off_slab1 = static_cast<uint32_t>(plan.off_slab1);
  p.off_att = static_cast<uint32_t>(plan.off_att);
  p.off_red = static_cast<uint32_t>(plan.off_red);
  p.off_norm = static_cast<uint32_t>(plan.off_norm);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  if (!plan.flow) {
    cuda::launch_kernel_ex(token::kernel_for(s.head_dim, p.group), dim3(plan.ctas),
                           dim3(token::kThreads), plan.smem_bytes, stream, attr, 1, p);
    return;
  }
  // flow_state (token_split.h flow_state_bytes): the sums, then their flags and the counters.
  auto* base = static_cast<uint8_t*>(a.flow_state);
  p.acc = reinterpret_cast<unsigned long long*>(base);
  p.acc_bad = reinterpret_cast<unsigned*>(base + token::flow_flags_offset(s.hidden));
  p.arrived = p.acc_bad + 2;
  p.o_per_head = plan.o_per_head;
  p.o_rows = plan.o_rows;
  p.o_box_rows = plan.o_box_rows;
  p.down_box_rows = plan.down_box_rows;
  p.off_act = static_cast<uint32_t>(plan.off_act);
  token::FlowParams fp{};  // about 16 KB, copied by the launch (a graph keeps its copy)
  fp.p = p;
  std::copy(a.maps, a.maps + s.num_layers, fp.maps);
  cuda::launch_kernel_ex(token::flow_kernel_for(s.head_dim, p.group), dim3(plan.ctas),
                         dim3(token::kThreads), plan.smem_bytes, stream, attr, 1, fp);
}

TokenMaps token_layers_tensor_maps(const TokenShape& s, const TokenLayersPlan& plan,
                                   const TokenLayer& w) {
  KVATTN_CHECK(plan.flow, "token_layers_tensor_maps: the plan is not the three-phase kernel's");
  const auto H = static_cast<uint64_t>(s.hidden), I = static_cast<uint64_t>(s.inter);
  const auto QD = static_cast<uint64_t>(s.num_heads) * s.head_dim;
  TokenMaps m{};
  m.o = cuda::make_tensor_map_2byte_plain("token kernel o_proj", w.wo, {QD, H}, {QD * 2},
                                          {static_cast<uint32_t>(s.head_dim),
                                           static_cast<uint32_t>(plan.o_box_rows)});
  m.down = cuda::make_tensor_map_2byte_plain("token kernel down", w.wdown, {I, H}, {I * 2},
                                             {static_cast<uint32_t>(plan.rows_gate_up),
                                              static_cast<uint32_t>(plan.down_box_rows)});
  return m;
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
