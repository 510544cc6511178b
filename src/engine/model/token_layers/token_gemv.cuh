// The token kernel's GEMV phases: the input of a projection staged in shared memory (a norm,
// or a plain copy), the CTA's weight rows fed into shared memory by bulk copies one phase
// ahead (WeightSlab), and the row dot products from shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/hopper/sm90_ptx.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda_model::token {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One of the two shared-memory weight buffers: an mbarrier whose phases complete as the bulk
// copies into it land. A slab's copies are issued by thread 0 after the CTA's last read of the
// buffer's previous slab (a grid barrier lies between); every thread waits on the phase it
// expects before reading, the phases alternating parity.
struct WeightSlab {
  uint32_t bar;   // shared address of the mbarrier
  uint32_t data;  // shared address of the buffer
  uint32_t parity;

  // Thread 0: rows [first, first + count) of w ([*, k] bf16) to the buffer's start, and, when
  // w2 is set, the same rows of w2 right after them (gate and up).
  __device__ __forceinline__ void issue(const void* w, const void* w2, int first, int count,
                                        int k) const {
    const uint32_t bytes = static_cast<uint32_t>(count) * static_cast<uint32_t>(k) * 2u;
    const uint32_t total = w2 != nullptr ? 2u * bytes : bytes;
    cuda::sm90::fence_proxy_async_smem();  // the generic reads of the previous slab come first
    if (total == 0) {
      cuda::sm90::mbar_arrive(bar);
      return;
    }
    cuda::sm90::mbar_arrive_expect_tx(bar, total);
    const auto* src = static_cast<const char*>(w) + int64_t{first} * k * 2;
    cuda::sm90::bulk_load(data, src, bytes, bar);
    if (w2 != nullptr) {
      const auto* src2 = static_cast<const char*>(w2) + int64_t{first} * k * 2;
      cuda::sm90::bulk_load(data + bytes, src2, bytes, bar);
    }
  }

  __device__ __forceinline__ void wait() {
    cuda::sm90::mbar_wait(bar, parity);
    parity ^= 1u;
  }
};

// The residual's addend in norm_stage: none, bf16 values another CTA wrote, or a fixed-point
// split-K sum (token_flow.cuh's FixedSum, read as the bf16 the unfused path would have stored).
struct NoAdd {
  __device__ __forceinline__ bool present() const { return false; }
  __device__ __forceinline__ void load(int, float (&)[8]) const {}
};
struct AddBf16 {
  const bf16* p;  // null: none
  __device__ __forceinline__ bool present() const { return p != nullptr; }
  __device__ __forceinline__ void load(int chunk, float (&b)[8]) const {
    to_f8(ld_cg16(p + int64_t{chunk} * 8), b);
  }
};

// xs[0:k) = rmsnorm(x (+ add)) * w as cuda_gemv.cu's norm_stage computes it for one row (and
// so add_rmsnorm, bit for bit): v = bf16(x + add); thread t sums v * v over elements t,
// t + 256, ... in order; warp sums, then the eight warp sums in one warp; inv = rsqrt(ss / k +
// eps); xs = bf16(w * bf16(v * inv)). x and add were written by other CTAs (read past L1);
// x_out (CTA 0 only, or null) receives v when there is an addend. w: the weight in shared
// memory (stage_weights; the staging's cp.async groups are waited for here, none other may be
// pending).
template <class Add>
__device__ __forceinline__ void norm_stage_add(const bf16* x, const Add& add, const bf16* w,
                                           float eps, int k, bf16* x_out, uint4* xs,
                                           float* red) {
  const int C = k >> 3;
  cuda::ptx::cp_async_wait<0>();  // w (shared memory) was staged by stage_weights
  for (int i = threadIdx.x; i < C; i += kThreads) {
    uint4 v = ld_cg16(x + int64_t{i} * 8);
    if (add.present()) {
      float a[8], b[8];
      to_f8(v, a);
      add.load(i, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) a[e] = a[e] + b[e];
      v = pack8(a);
      if (x_out != nullptr) *reinterpret_cast<uint4*>(x_out + int64_t{i} * 8) = v;
    }
    xs[i] = v;
  }
  __syncthreads();
  const bf16* xh = reinterpret_cast<const bf16*>(xs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    const float v = f(xh[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float v = lane < kWarps ? red[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) red[kWarps] = rsqrtf(v / static_cast<float>(k) + eps);
  }
  __syncthreads();
  const float inv = red[kWarps];
  for (int i = threadIdx.x; i < C; i += kThreads) {
    float v[8], g[8];
    to_f8(xs[i], v);
    to_f8(*reinterpret_cast<const uint4*>(w + int64_t{i} * 8), g);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = g[e] * r(v[e] * inv);
    xs[i] = pack8(v);
  }
  __syncthreads();
}

// The two-pointer form (add null: no addend), as the five-phase kernel calls it.
__device__ __forceinline__ void norm_stage(const bf16* x, const bf16* add, const bf16* w,
                                           float eps, int k, bf16* x_out, uint4* xs,
                                           float* red) {
  norm_stage_add(x, AddBf16{add}, w, eps, k, x_out, xs, red);
}

// xs[0:k) = src[0:k) (written by other CTAs).
__device__ __forceinline__ void stage_plain(const bf16* src, int k, uint4* xs) {
  for (int i = threadIdx.x; i < (k >> 3); i += kThreads) xs[i] = ld_cg16(src + int64_t{i} * 8);
  __syncthreads();
}

// A warp's dot products of N slab rows (k / 8 16-byte chunks each) with xs, summed over the
// warp (every lane holds the sums): N independent chains, so their loads and shuffles overlap.
template <int N>
__device__ __forceinline__ void row_dots(const uint4* slab, const int (&rows)[N], const uint4* xs,
                                         int C, int lane, float (&out)[N]) {
  float acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float xf[8];
    to_f8(xs[c], xf);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float wf[8];
      to_f8(slab[int64_t{rows[n]} * C + c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[n] = fmaf(wf[e], xf[e], acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) out[n] = warp_sum(acc[n]);
}

inline constexpr int kRowsAtOnce = 4;

// out(r, sum) for each of the CTA's rows r in [0, count) (sum: slab row r . xs, fp32): warp w
// takes rows w, w + 8, ..., kRowsAtOnce of them at a time; lane n of the warp calls out for
// its n-th row.
template <class Out>
__device__ __forceinline__ void gemv_rows_to(const uint4* slab, const uint4* xs, int k,
                                             int count, const Out& out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = k >> 3;
  for (int r0 = warp; r0 < count; r0 += kWarps * kRowsAtOnce) {
    int rows[kRowsAtOnce];
#pragma unroll
    for (int n = 0; n < kRowsAtOnce; ++n) rows[n] = min(r0 + n * kWarps, count - 1);
    float sum[kRowsAtOnce];
    row_dots(slab, rows, xs, C, lane, sum);
#pragma unroll
    for (int n = 0; n < kRowsAtOnce; ++n) {
      if (lane == n && r0 + n * kWarps < count) out(rows[n], sum[n]);
    }
  }
}

// y[first + r] = bf16(slab row r . xs) for the CTA's rows.
__device__ __forceinline__ void gemv_rows(const uint4* slab, const uint4* xs, int k, RowRange rr,
                                          bf16* y) {
  gemv_rows_to(slab, xs, k, rr.count,
               [&](int row, float sum) { y[rr.first + row] = __float2bfloat16(sum); });
}

// out(j, silu_mul) for j in [0, count), from the gate row j and the up row j (the slab holds
// count gate rows then count up rows): k::silu_mul's formula on the bf16-rounded sums, the
// result bf16. Two features at a time.
template <class Out>
__device__ __forceinline__ void gate_up_rows_to(const uint4* slab, const uint4* xs, int k,
                                                int count, const Out& out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = k >> 3;
  for (int j0 = warp; j0 < count; j0 += 2 * kWarps) {
    const int j1 = min(j0 + kWarps, count - 1);
    const int rows[4] = {j0, count + j0, j1, count + j1};
    float sum[4];
    row_dots(slab, rows, xs, C, lane, sum);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int j = n == 0 ? j0 : j0 + kWarps;
      if (lane == n && j < count) {
        const float g = r(sum[2 * n]);
        const float u = r(sum[2 * n + 1]);
        out(j, __float2bfloat16(r(g / (1.0f + expf(-g))) * u));
      }
    }
  }
}

// act[first + j] for the CTA's features.
__device__ __forceinline__ void gate_up_rows(const uint4* slab, const uint4* xs, int k,
                                             RowRange rr, bf16* act) {
  gate_up_rows_to(slab, xs, k, rr.count, [&](int j, bf16 v) { act[rr.first + j] = v; });
}

// Warps 1-7 copy n bf16 (n % 8 == 0, 16-byte aligned) into shared memory by cp.async, one
// commit group (warp 0's thread 0 arrives at the grid barriers and issues none: grid_barrier.cuh):
// read-only weights staged a phase before they are used (the user waits with cp_async_wait<0>
// and a __syncthreads first).
__device__ __forceinline__ void stage_weights(bf16* dst, const void* src, int n) {
  for (int i = static_cast<int>(threadIdx.x) - 32; i >= 0 && i < (n >> 3); i += kThreads - 32) {
    cuda::ptx::cp_async_16(cuda::ptx::smem_addr(dst + i * 8),
                           static_cast<const bf16*>(src) + i * 8, true);
  }
  cuda::ptx::cp_async_commit();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda_model::token
