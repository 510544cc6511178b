// The token kernel (token_layers.h): the phase sequence of each layer, and its plan and launch.
#ifdef KVATTN_WITH_CUDA

#include "engine/model/token_layers/token_layers.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "engine/model/token_layers/grid_barrier.cuh"
#include "engine/model/token_layers/token_attention.cuh"
#include "engine/model/token_layers/token_gemv.cuh"
#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/cuda_check.h"
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
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint4* xs = reinterpret_cast<uint4*>(smem + p.off_xs);
  const uint4* slab0 = reinterpret_cast<const uint4*>(smem + p.off_slab0);
  const uint4* slab1 = reinterpret_cast<const uint4*>(smem + p.off_slab1);
  uint8_t* att = smem + p.off_att;
  float* red = reinterpret_cast<float*>(smem + p.off_red);
  bf16* nw_in = reinterpret_cast<bf16*>(smem + p.off_norm);
  bf16* nw_post = nw_in + p.hidden;
  WeightSlab s0{cuda::ptx::smem_addr(bars), cuda::ptx::smem_addr(slab0), 0u};
  WeightSlab s1{cuda::ptx::smem_addr(bars + 1), cuda::ptx::smem_addr(slab1), 0u};
  const bool lead = threadIdx.x == 0;
  if (lead) {
    cuda::sm90::mbar_init(s0.bar, 1);
    cuda::sm90::mbar_init(s1.bar, 1);
    cuda::sm90::fence_barrier_init();
  }
  __syncthreads();

  const int L = max(0, __ldg(p.context_len));
  const Pieces pc = plan_pieces(p, L);
  const int H = p.hidden, I = p.inter, QD = p.nh * D;
  const RowRange r_qkv = row_range(p.qkv_dim, p.rows_qkv);
  const RowRange r_o = row_range(H, p.rows_o);
  const RowRange r_gu = row_range(I, p.rows_gate_up);
  const RowRange r_down = row_range(H, p.rows_down);
  using S = AttSmem<D>;
  bf16* kr = reinterpret_cast<bf16*>(att + S::kUnion);
  bf16* vr = kr + kRoundKeys * D;
  const bool first_item = static_cast<int>(blockIdx.x) < pc.items;
  const int fh = first_item ? static_cast<int>(blockIdx.x) / pc.pieces : 0;
  const int fk0 = first_item ? min(L, (static_cast<int>(blockIdx.x) - fh * pc.pieces) * pc.chunk) : 0;
  const int fk1 = first_item ? min(L, fk0 + pc.chunk) : 0;

  const bf16* xc = p.x;
  bf16* xn = p.x2;
  if (p.wall != nullptr && blockIdx.x == 0 && lead) p.wall[0] = globaltimer();
  if (lead) s0.issue(p.layers[0].wqkv, nullptr, r_qkv.first, r_qkv.count, H);
  bf16* qk_norms = reinterpret_cast<bf16*>(att + S::kQkNorm);
  rope_table<D>(p, att);
  int* blocks = reinterpret_cast<int*>(att + S::kBlocks);
  const int fr1 = min(fk1, fk0 + kRoundKeys);  // the first item's first round: keys [fk0, fr1)
  if (first_item) first_round_blocks(p, fk0, fr1, blocks);
  // Where the first round's K/V copies go out (Params::prefetch): 1 in phase A after the input
  // norm, 2 in the previous layer's phase E (layer 0: here), 0 not ahead (phase B loads it).
  const bool ahead = first_item && p.prefetch != 0;
  if (ahead && p.prefetch == 2) {
    __syncthreads();  // blocks
    load_round<D>(p, p.layers[0], fh, fk0, fr1, L, kr, vr, blocks);
  }
  stage_weights(nw_in, p.layers[0].input_norm, H);
  if (p.layers[0].q_norm != nullptr) {
    stage_weights(qk_norms, p.layers[0].q_norm, D);
    stage_weights(qk_norms + D, p.layers[0].k_norm, D);
  }
  TokenLayer w = p.layers[0];
  for (int l = 0; l < p.num_layers; ++l) {
    // ---- A: input norm + qkv ----
    stamp(p, l, kStampA0);
    if (lead) s1.issue(w.wo, nullptr, r_o.first, r_o.count, QD);
    norm_stage(xc, l == 0 ? nullptr : p.o, nw_in, p.eps, H,
               l > 0 && blockIdx.x == 0 ? xn : nullptr, xs, red);
    if (ahead && p.prefetch == 1) load_round<D>(p, w, fh, fk0, fr1, L, kr, vr, blocks);
    stamp(p, l, kStampA1);
    s0.wait();
    stamp(p, l, kStampA2);
    gemv_rows(slab0, xs, H, r_qkv, p.qkv);
    stamp(p, l, kStampA3);
    if (l > 0) {
      const bf16* t = xc;
      xc = xn;
      xn = const_cast<bf16*>(t);
    }
    grid_barrier(p.barrier);
    // ---- B: attention pieces ----
    stamp(p, l, kStampB0);
    if (lead) {
      const auto* gu = static_cast<const bf16*>(w.wgate_up);
      s0.issue(gu, gu + int64_t{I} * H, r_gu.first, r_gu.count, H);
    }
    attention_items<D, G>(p, w, L, pc, att, l, ahead);
    stamp(p, l, kStampB2);
    grid_barrier(p.barrier);
    // ---- C: merge + o_proj ----
    stamp(p, l, kStampC0);
    stage_weights(nw_post, w.post_norm, H);
    merge_pieces<D>(p, pc, reinterpret_cast<bf16*>(xs), att);
    stamp(p, l, kStampC1);
    s1.wait();
    stamp(p, l, kStampC2);
    gemv_rows(slab1, xs, QD, r_o, p.o);
    stamp(p, l, kStampC3);
    grid_barrier(p.barrier);
    // ---- D: residual + post-attention norm + gate_up ----
    stamp(p, l, kStampD0);
    if (lead) s1.issue(w.wdown, nullptr, r_down.first, r_down.count, I);
    norm_stage(xc, p.o, nw_post, p.eps, H,
               blockIdx.x == 0 ? xn : nullptr, xs, red);
    stamp(p, l, kStampD1);
    s0.wait();
    stamp(p, l, kStampD2);
    gate_up_rows(slab0, xs, H, r_gu, p.act);
    stamp(p, l, kStampD3);
    {
      const bf16* t = xc;
      xc = xn;
      xn = const_cast<bf16*>(t);
    }
    grid_barrier(p.barrier);
    // ---- E: down ----
    stamp(p, l, kStampE0);
    TokenLayer next = w;
    if (l + 1 < p.num_layers) {
      next = p.layers[l + 1];
      if (lead) s0.issue(next.wqkv, nullptr, r_qkv.first, r_qkv.count, H);
      stage_weights(nw_in, next.input_norm, H);
      if (ahead && p.prefetch == 2) load_round<D>(p, next, fh, fk0, fr1, L, kr, vr, blocks);
      if (next.q_norm != nullptr) {
        stage_weights(qk_norms, next.q_norm, D);
        stage_weights(qk_norms + D, next.k_norm, D);
      }
    }
    stage_plain(p.act, I, xs);
    stamp(p, l, kStampE1);
    s1.wait();
    stamp(p, l, kStampE2);
    gemv_rows(slab1, xs, I, r_down, p.o);
    stamp(p, l, kStampE3);
    if (l + 1 < p.num_layers) grid_barrier(p.barrier);
    stamp(p, l, kStampEnd);
    w = next;
  }
  if (p.wall != nullptr && blockIdx.x == 0 && lead) p.wall[1] = globaltimer();
#endif
}

constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

using Kernel = void (*)(Params);

template <int D>
Kernel kernel_for_group(int g) {
  switch (g) {
    case 1: return token_layers_kernel<D, 1>;
    case 2: return token_layers_kernel<D, 2>;
    case 3: return token_layers_kernel<D, 3>;
    case 4: return token_layers_kernel<D, 4>;
    case 5: return token_layers_kernel<D, 5>;
    case 6: return token_layers_kernel<D, 6>;
    case 7: return token_layers_kernel<D, 7>;
    default: return token_layers_kernel<D, 8>;
  }
}

// The instantiation for head_dim d (64 or 128) and GQA group g (1-8).
Kernel kernel_for(int d, int g) { return d == 64 ? kernel_for_group<64>(g) : kernel_for_group<128>(g); }

}  // namespace
}  // namespace token

TokenLayersPlan token_layers_plan(const TokenShape& s, int device) {
  TokenLayersPlan plan;
  auto no = [&](std::string why) {
    plan.ok = false;
    plan.why_not = std::move(why);
    return plan;
  };
  if (s.num_layers <= 0) return no("no layers");
  if (s.head_dim != 64 && s.head_dim != 128) return no("head_dim is not 64 or 128");
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) return no("heads");
  const int g = s.num_heads / s.num_kv_heads;
  if (g > token::kMaxGroup) return no("GQA group above 8");
  if (s.hidden % 8 != 0 || s.inter % 8 != 0) return no("hidden or intermediate size not a multiple of 8");
  const int R = s.rotary_dim == 0 ? s.head_dim : s.rotary_dim;
  if (R % 2 != 0 || R > s.head_dim) return no("rotary_dim");
  int major = 0, sms = 0, coop = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major != 9) return no("not an sm_90 device");
  if (coop == 0) return no("no cooperative launch");
  const int n = sms;
  auto per = [n](int rows) { return (rows + n - 1) / n; };
  const int D = s.head_dim, H = s.hidden, I = s.inter, QD = s.num_heads * D;
  const int qkv_dim = (s.num_heads + 2 * s.num_kv_heads) * D;
  plan.ctas = n;
  plan.rows_qkv = per(qkv_dim);
  plan.rows_o = per(H);
  plan.rows_gate_up = per(I);
  plan.rows_down = per(H);
  plan.max_pieces = std::max(1, std::min(token::kMaxPiecesPerHead, n / s.num_kv_heads));
  plan.max_context = int64_t{plan.max_pieces} * token::kRoundKeys;
  const size_t slab0 = std::max(size_t(plan.rows_qkv) * H, size_t(2) * plan.rows_gate_up * H) * 2;
  const size_t slab1 = std::max(size_t(plan.rows_o) * QD, size_t(plan.rows_down) * I) * 2;
  const size_t xs = size_t(std::max({H, QD, I})) * 2;
  size_t off = 16;  // the two mbarriers
  plan.off_red = off;
  off = token::align_up(off + sizeof(float) * 16, 128);
  plan.off_xs = off;
  off = token::align_up(off + xs, 128);
  plan.off_slab0 = off;
  off = token::align_up(off + slab0, 128);
  plan.off_slab1 = off;
  off = token::align_up(off + slab1, 128);
  plan.off_att = off;
  off = token::align_up(off + token::att_smem_bytes(D), 128);
  plan.off_norm = off;
  off = token::align_up(off + size_t(4) * H, 128);
  plan.smem_bytes = off;
  if (plan.smem_bytes > static_cast<size_t>(optin)) return no("shared memory above the device's limit");
  plan.workspace_bytes = sizeof(float) * size_t(s.num_kv_heads) * plan.max_pieces * g * (D + 2);
  auto kernel = token::kernel_for(D, g);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(plan.smem_bytes)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, token::kThreads,
                                                           plan.smem_bytes));
  if (per_sm < 1) return no("the kernel does not fit an SM");
  plan.ok = true;
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
  auto kernel = token::kernel_for(s.head_dim, p.group);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cuda::launch_kernel_ex(kernel, dim3(plan.ctas), dim3(token::kThreads), plan.smem_bytes, stream,
                         attr, 1, p);
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
