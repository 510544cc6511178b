// The three-phase token kernel's own parts (token_flow.cu): split-K sums in fixed point, the
// KV heads' pieces counted by arrival counters instead of a grid barrier, and the two split
// GEMVs.
//
// Fixed point, because the sums must not depend on the order the CTAs add in (greedy outputs
// must repeat, graphs or not): a partial p (fp32) adds round(p * 2^32) to a 64-bit integer
// with one atomic, and integer addition is associative. |p| is clamped to 2^23 (8.4e6), so at
// most 255 partials stay below 2^63 (the kernel runs one CTA an SM: 132 on an H100 / H200); a
// non-finite partial raises the sum's flag instead, and the reader then sees NaN in every
// element. The reader rounds the sum to bf16, the value the unfused path stores for the
// projection.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/model/token_layers/grid_barrier.cuh"
#include "engine/model/token_layers/token_attention.cuh"
#include "engine/model/token_layers/token_gemv.cuh"
#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"

namespace kvattn::cuda_model::token {

// (kFixedOne, kFixedClamp, fixed_of and fixed_sum_value: token_split.h.)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One fixed-point sum of `hidden` elements and its non-finite flag (Params::acc / acc_bad).
struct FixedSum {
  unsigned long long* v;
  unsigned* bad;

  __device__ __forceinline__ void add(int i, float x) const {
    if (!isfinite(x)) {
      atomicOr(bad, 1u);
      return;
    }
    atomicAdd(v + i, fixed_of(x));
  }

  // The whole CTA, in a phase where no CTA adds to or reads the sum (grid barriers on both
  // sides): back to zero.
  __device__ __forceinline__ void zero(int n) const {
    for (int i = threadIdx.x; i < n; i += kThreads) v[i] = 0ull;
    if (threadIdx.x == 0) *bad = 0u;
  }
};

// A sum's value as the bf16 the unfused path would have stored (as a float).
__device__ __forceinline__ float fixed_value(unsigned long long a) {
  return f(__float2bfloat16(fixed_sum_value(a)));
}

// norm_stage's addend read from a FixedSum another CTA completed (read past L1).
struct AddFixed {
  const unsigned long long* v;
  bool bad;
  __device__ __forceinline__ explicit AddFixed(const FixedSum& s)
      : v(s.v), bad(__ldcg(s.bad) != 0u) {}
  __device__ __forceinline__ bool present() const { return true; }
  __device__ __forceinline__ void load(int chunk, float (&b)[8]) const {
    const auto* src = reinterpret_cast<const ulonglong2*>(v + int64_t{chunk} * 8);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const ulonglong2 t = __ldcg(src + q);
      b[2 * q] = bad ? __int_as_float(0x7fc00000) : fixed_value(t.x);
      b[2 * q + 1] = bad ? __int_as_float(0x7fc00000) : fixed_value(t.y);
    }
  }
};

// Thread 0: `boxes` boxes of a 2-D tensor map (plain layout), box i at coordinates (c0, c1 + i
// * box_rows), into the slab at i * box_bytes; every box counts its whole size (rows past the
// tensor land as zeros). No box: the phase completes at once. Issued after the CTA's last read
// of the slab's previous contents (as WeightSlab::issue).
__device__ __forceinline__ void issue_boxes(const WeightSlab& s, const CUtensorMap* map, int c0,
                                            int c1, int boxes, int box_rows, uint32_t box_bytes) {
  cuda::sm90::fence_proxy_async_smem();
  if (boxes == 0) {
    cuda::sm90::mbar_arrive(s.bar);
    return;
  }
  cuda::sm90::mbar_arrive_expect_tx(s.bar, static_cast<uint32_t>(boxes) * box_bytes);
  for (int i = 0; i < boxes; ++i) {
    cuda::sm90::tma_load_2d(s.data + static_cast<uint32_t>(i) * box_bytes, map, s.bar, c0,
                            c1 + i * box_rows);
  }
}

// CTA blockIdx.x's o_proj share (token_split.h o_unit_of).
__device__ __forceinline__ OUnit o_unit(const Params& p) {
  return o_unit_of(static_cast<int>(blockIdx.x), p.nh, p.o_per_head, p.o_rows, p.hidden);
}

// After phase B's item (attention_items ends with a __syncthreads, so the item's piece is in
// the workspace; a CTA has at most one item: the plan keeps pieces x KV heads <= CTAs): thread 0
// counts it towards its KV head's arrivals (release). The counters only grow.
__device__ __forceinline__ void arrive(const Params& p, Pieces pc) {
  if (static_cast<int>(blockIdx.x) >= pc.items || threadIdx.x != 0) return;
  red_add_release_gpu(p.arrived + static_cast<int>(blockIdx.x) / pc.pieces, 1u);
}

// Thread 0 waits until KV head h's arrival counter has advanced `count` past `base` (its value
// when the launch began: no arrival of this launch comes before the first grid barrier), then
// the block reads the head's pieces.
__device__ __forceinline__ void wait_arrivals(const Params& p, int h, unsigned base,
                                              unsigned count) {
  if (threadIdx.x == 0) {
    while (ld_acquire_gpu(p.arrived + h) - base < count) {
    }
  }
  __syncthreads();
}

// The down projection's partial over the CTA's columns: out[row] = slab row . act for every
// output row (slab: [down_box_rows-padded hidden][cols] bf16, act: floats [cols], zeros past
// the CTA's features), each added to `sum`. A thread a row.
__device__ __forceinline__ void down_partial(const uint4* slab, const float* act, int cols,
                                             int hidden, const FixedSum& sum) {
  const int C = cols >> 3;
  for (int row = threadIdx.x; row < hidden; row += kThreads) {
    const uint4* w = slab + int64_t{row} * C;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
      float wf[8];
      to_f8(w[c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], act[c * 8 + e], acc);
    }
    sum.add(row, acc);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda_model::token
