// The merge kernel of the split kernel's stream mode: combines the pieces of each sequence
// that a range boundary cut (normalized partials + log2-LSE in the workspace).
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_mask.cuh"
#include "kernels/cuda/decode/decode_stream_ranges.h"

namespace kvattn::cuda {
namespace {

// Sequence b's first piece slot and piece count, from the split kernel's tile prefix sum over
// the lengths and its ranges: from the lengths alone, so that a merge launched by PDL has them
// before its grid-dependency wait. Whole warp; b < 0: zeros. Reads only the lengths (and
// cache_leftpad for kExt), which no kernel of this decode writes.
template <bool kExt>
__device__ __forceinline__ void stream_meta(const DecodeParams& p, int b, int lane, int& slot0,
                                            int& n) {
  int before = 0, mine = 0, all = 0;
  for (int s = lane; s < p.num_seqs; s += 32) {
    const int t = visited_tiles<kExt>(p, s, seq_len(p, s, false));
    all += t;
    before += s < b ? t : 0;
    mine += s == b ? t : 0;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    before += __shfl_xor_sync(0xffffffffu, before, off);
    mine += __shfl_xor_sync(0xffffffffu, mine, off);
    all += __shfl_xor_sync(0xffffffffu, all, off);
  }
  slot0 = 0;
  n = 0;
  if (b < 0 || mine == 0) return;
  const StreamRanges ranges = StreamRanges::make(all, p.parts, p.part_cap, p.dynamic_split != 0);
  const int r0 = ranges.of_tile(before);
  slot0 = r0 + b;
  n = ranges.of_tile(before + mine - 1) - r0 + 1;
}

// ---- merge of the pieces: wpr warps per output row -------------------------------------------
// kExt: the launch's split kernel is the extended one (its sequences' tiles start at the
// window's first tile).
template <typename T, int D, bool kExt>
__global__ void __launch_bounds__(256) merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kPer = D / 32;  // floats per lane
  __shared__ float red[8][D + 4];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int wpr = p.merge_wpr;
  const int sub = warp % wpr;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * (8 / wpr) + warp / wpr;
  const int64_t total = static_cast<int64_t>(p.num_seqs) * p.q_len * p.num_heads;
  int n = 0, slot0 = 0, head = 0, kvh = 0, r = 0, b = -1;
  int64_t token = 0;
  if (row_id < total) {
    head = static_cast<int>(row_id % p.num_heads);
    token = row_id / p.num_heads;
    b = static_cast<int>(token / p.q_len);
    const int i = static_cast<int>(token - static_cast<int64_t>(b) * p.q_len);
    kvh = head / p.group;
    r = i * p.group + (head - kvh * p.group);
  }
  // The row's meta comes from the lengths: launched with PDL (p.merge_pdl), this CTA may run
  // while the split kernel does, so that only the pieces' round trip follows the split
  // kernel's completion (the wait makes them complete and visible). A plain launch starts
  // after the split kernel and computes the same (the wait is then a no-op).
  stream_meta<kExt>(p, b, lane, slot0, n);
  ptx::grid_dependency_wait();
  // Pieces sub, sub + wpr, ... of this row, in batches of kUnroll whose LSEs and partials are
  // loaded together (one round trip a batch): a running max over the batches (every lane
  // loads every LSE of its batch, so the max is the warp's without a shuffle), the sum and the
  // accumulator rescaled when it grows. With one batch (the usual case: n <= kUnroll x wpr)
  // this is the arithmetic of a max over all the pieces first, bit for bit.
  const int64_t wi0 = (static_cast<int64_t>(slot0) * p.num_kv_heads + kvh) * p.rows + r;
  const int64_t wstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;
  float mx = kNegInf;
  float acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  float wsum = 0.0f;
  if (n >= 2) {
    constexpr int kUnroll = 8;  // loads in flight per warp
    for (int j0 = sub; j0 < n; j0 += kUnroll * wpr) {
      float lse[kUnroll];
      float x[kUnroll][kPer];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * wpr;
        lse[u] = kNegInf;
#pragma unroll
        for (int e = 0; e < kPer; ++e) x[u][e] = 0.0f;
        if (j < n) {
          const int64_t wi = wi0 + j * wstep;
          lse[u] = p.ws_lse[wi];
          const float* src = p.ws_o + wi * D + lane * kPer;
          if constexpr (kPer % 4 == 0) {  // head_dim 128, 256
#pragma unroll
            for (int q4 = 0; q4 < kPer / 4; ++q4) {
              const float4 v = *reinterpret_cast<const float4*>(src + 4 * q4);
              x[u][4 * q4] = v.x;
              x[u][4 * q4 + 1] = v.y;
              x[u][4 * q4 + 2] = v.z;
              x[u][4 * q4 + 3] = v.w;
            }
          } else {  // head_dim 64
            static_assert(kPer == 2, "merge_kernel: head_dim 64, 128 or 256");
            const float2 v = *reinterpret_cast<const float2*>(src);
            x[u][0] = v.x;
            x[u][1] = v.y;
          }
        }
      }
      float bm = mx;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) bm = fmaxf(bm, lse[u]);
      if (bm == kNegInf) continue;  // no piece so far saw a key
      if (bm > mx) {  // mx == -inf: acc and wsum are still 0, the factor 0 keeps them so
        const float c = mx == kNegInf ? 0.0f : fast_exp2(mx - bm);
        wsum *= c;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] *= c;
        mx = bm;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float f = lse[u] == kNegInf ? 0.0f : fast_exp2(lse[u] - mx);
        wsum += f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] += f * x[u][e];
      }
    }
  }
  if (wpr > 1) {  // combine the row's warps through shared memory
    if (lane == 0) {
      red[warp][D] = mx;
      red[warp][D + 1] = wsum;
    }
#pragma unroll
    for (int e = 0; e < kPer; ++e) red[warp][lane * kPer + e] = acc[e];
    __syncthreads();
    if (sub == 0) {
      float gm = kNegInf;
      for (int w = 0; w < wpr; ++w) gm = fmaxf(gm, red[warp + w][D]);
      wsum = 0.0f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
      if (gm != kNegInf) {
        for (int w = 0; w < wpr; ++w) {
          const float wm = red[warp + w][D];
          const float f = wm == kNegInf ? 0.0f : fast_exp2(wm - gm);
          wsum += f * red[warp + w][D + 1];
#pragma unroll
          for (int e = 0; e < kPer; ++e) acc[e] += f * red[warp + w][lane * kPer + e];
        }
      }
      mx = gm;
    }
  }
  if (sub != 0 || n < 2) return;
  const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
  uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                  static_cast<int64_t>(head) * mem_head_dim<D>(p) + lane * kPer;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    if (lane * kPer + e < mem_head_dim<D>(p)) dst[e] = to_bits<T>(acc[e] * inv);  // padded tiles
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[head * p.lse_head_stride + token] =
        wsum > 0.0f ? (mx + __log2f(wsum)) * 0.69314718055994531f : kNegInf;
  }
}

}  // namespace
}  // namespace kvattn::cuda
