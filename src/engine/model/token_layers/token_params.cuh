// The token kernel's parameters (token_layers.h's shape, plan and step arguments, typed) and
// the helpers every phase uses: sizes, loads past L1, and the mbarrier-fed weight slabs.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "engine/model/cuda_bf16_math.cuh"
#include "engine/model/token_layers/token_layers.h"

namespace kvattn::cuda_model::token {

// (kWarps, kThreads, kMaxGroup, kRoundKeys, the pieces' sizes, RowRange, Pieces, OUnit and the
// fixed-point helpers: token_split.h.)
inline constexpr int kStamps = 20;  // token_layers.h TokenStamp

struct Params {
  const TokenLayer* layers;
  int num_layers, hidden, nh, nkv, group, head_dim, inter, qkv_dim;
  float eps;
  float scale_log2;  // softmax scale * log2(e)
  const float* inv_freq;
  float rope_base;  // theta, or 0 with the inv_freq table
  float attention_factor;
  int rotary_dim, interleaved;
  const int32_t* position;
  const int32_t* slot;
  const int32_t* context_len;
  const int32_t* block_table;
  int64_t table_width, block_size, num_blocks;
  bf16* x;
  bf16* x2;
  bf16* o;
  bf16* qkv;
  bf16* act;
  float* workspace;
  unsigned* barrier;
  uint32_t* fault_word;
  // Rows of each GEMV phase a CTA owns (CTA b: [b * rows, (b + 1) * rows) of the outputs).
  int rows_qkv, rows_o, rows_gate_up, rows_down;
  int max_pieces;
  int prefetch;  // the first K/V round's copies: 0 in phase B, 1 phase A, 2 the previous phase E
  // Diagnostics (token_layers.h TokenLayersArgs::stamps): null, or [ctas][num_layers][kStamps]
  // clock64 values at the phases' boundaries, and [2] globaltimer at CTA 0's start and end.
  unsigned long long* stamps;
  unsigned long long* wall;
  uint32_t off_xs, off_slab0, off_slab1, off_att, off_red, off_norm;
  // The three-phase kernel (token_flow.cu; unused by the five-phase one): the two fixed-point
  // sums [2][hidden] (o_proj's, down's) and their non-finite flags [2], the KV heads' piece
  // arrivals [nkv] (counters), and the split of o_proj (o_per_head CTAs a query head, o_rows output rows
  // each, loaded in boxes of o_box_rows rows) and of down (rows_gate_up columns a CTA, boxes
  // of down_box_rows rows); off_act: the CTA's SiLU * up values (floats [rows_gate_up]).
  unsigned long long* acc;
  unsigned* acc_bad;
  unsigned* arrived;
  int o_per_head, o_rows, o_box_rows, down_box_rows;
  uint32_t off_act;
};

// The three-phase kernel's parameters: Params and its layers' tensor maps, which TMA reads
// from the kernel's parameter space (__grid_constant__: no tensormap fence, as a map in global
// memory written by the host would need before every use).
struct FlowParams {
  Params p;
  TokenMaps maps[kMaxFlowLayers];
};

// The kernels for head_dim d (64 or 128) and GQA group g (1-8): the five-phase one
// (token_layers.cu) and the three-phase one (token_flow.cu).
using Kernel = void (*)(Params);
using FlowKernel = void (*)(FlowParams);
Kernel kernel_for(int d, int g);
FlowKernel flow_kernel_for(int d, int g);

// pick(D, G) for head_dim d (64 or 128) and group g (1-8) as integral constants: the
// instantiation tables of kernel_for and flow_kernel_for.
template <class Pick>
auto instantiate(int d, int g, Pick pick) {
  using K = decltype(pick(std::integral_constant<int, 64>{}, std::integral_constant<int, 1>{}));
  auto by_group = [&](auto dd) -> K {
    switch (g) {
      case 1: return pick(dd, std::integral_constant<int, 1>{});
      case 2: return pick(dd, std::integral_constant<int, 2>{});
      case 3: return pick(dd, std::integral_constant<int, 3>{});
      case 4: return pick(dd, std::integral_constant<int, 4>{});
      case 5: return pick(dd, std::integral_constant<int, 5>{});
      case 6: return pick(dd, std::integral_constant<int, 6>{});
      case 7: return pick(dd, std::integral_constant<int, 7>{});
      default: return pick(dd, std::integral_constant<int, 8>{});
    }
  };
  return d == 64 ? by_group(std::integral_constant<int, 64>{})
                 : by_group(std::integral_constant<int, 128>{});
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 records clock64 at stamp k of layer l (when stamps are asked for).
__device__ __forceinline__ void stamp(const Params& p, int l, int k) {
  if (p.stamps != nullptr && threadIdx.x == 0) {
    p.stamps[(int64_t{blockIdx.x} * p.num_layers + l) * kStamps + k] = clock64();
  }
}

// 16 bytes that another CTA of this launch wrote (ld.global.cg: L2, never a stale L1 line).
__device__ __forceinline__ uint4 ld_cg16(const void* p) {
  return __ldcg(reinterpret_cast<const uint4*>(p));
}

// (f, r, lo_f, hi_f, to_f8, pack2, pack8 and warp_sum: cuda_bf16_math.cuh.)

// CTA blockIdx.x's share of a phase of n rows, `rows` a CTA (token_split.h row_range_of).
__device__ __forceinline__ RowRange row_range(int n, int rows) {
  return row_range_of(static_cast<int>(blockIdx.x), n, rows);
}

// The attention pieces of a step over L keys (token_split.h pieces_of).
__device__ __forceinline__ Pieces plan_pieces(const Params& p, int L) {
  return pieces_of(L, p.max_pieces, p.nkv);
}

}  // namespace kvattn::cuda_model::token
