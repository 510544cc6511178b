#ifdef KVATTN_WITH_CUDA

#include "engine/model/cuda_gemv.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_rope_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"

// Thread block clusters (sm_90+) for the qkv GEMV's q/k norm + RoPE + KV write epilogue; other
// targets never launch it (Gemv::run_rmsnorm_rope_kv declines there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVATTN_GEMV_CLUSTERS 1
#include <cooperative_groups.h>
#else
#define KVATTN_GEMV_CLUSTERS 0
#endif

// Layout of the work. A CTA of 8 warps owns a tile of output features (weight rows); each warp
// owns kRowsPerWarp of them and streams those rows whole, 16 bytes (8 bf16) per lane per load,
// U chunks per row unrolled so that kRowsPerWarp * U loads are in flight per thread before the
// first use. When n is small (o_proj/down: 1024 features) the 8 warps of a CTA split K instead
// (ks warps per row group, interleaved chunks), so the grid still covers every SM, and their
// partial sums meet in shared memory. x (all M rows) is staged in shared memory once per CTA;
// the grid is at most one wave of resident CTAs, each looping over tiles, so that staging is
// paid once per CTA, not once per tile. Each thread accumulates fp32 sums for all M rows of x
// and its kRowsPerWarp weight rows; a warp reduces them with a reduce-scatter (V - 1 + 5 -
// log2 V shuffles for V values instead of 5 V) and rounds each to bf16 once.
//
// Split (Gemv::split): R = 4 rows a warp and K split until two CTAs a SM, except where R = 2
// with no K split already gives a CTA a SM (qkv 4096, gate_up 6144 on 132 SMs): there each
// lane keeps 8 (M <= 2) or 4 loads in flight with no barrier or shared-memory reduction.
//
// Variants (one template, the same main loop and reduction, so the same sums for a given
// (n, k)): kPlain stages x as given; kNorm stages rmsnorm(x [+ add]) computed by every CTA as
// add_rmsnorm computes it, bit for bit (norm_stage); kNormSilu also pairs each warp's gate and
// up rows (features j, rows j and n/2 + j) and writes silu_mul's bf16(bf16(silu(g)) * u)
// instead of y. Not yet run on a GPU (2026-12-02); predictions in
// docs/notes/decode-fused-gemv.md.

namespace kvattn::cuda_model {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

constexpr int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}
constexpr int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

// M rows of x, R weight rows per warp.
template <int M, int R>
struct Shape {
  static constexpr int kV = R * M;                  // sums per thread
  static constexpr int kVP = pow2_ceil(kV);         // padded to a power of two (<= 32)
  static constexpr int kLog = log2_exact(kVP);
  // Chunks per row in flight: R * kUnroll loads per thread (8-16 at M <= 2, 4-8 above).
  static constexpr int kUnroll = (M <= 2 ? 4 : 2) * (4 / R);
};

// Reduction buffer for K-split CTAs: one kVP-vector per warp (floats), after x.
constexpr size_t kRedBytes = size_t{kWarps} * 32 * sizeof(float);

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// Asks L2 for the 128-byte line at p (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}


// One reduce-scatter step: lanes with bit `o` keep the upper half of a[0:N], the others the
// lower half, each adding its partner's copy of the half it keeps.
template <int N, int O, int VP>
__device__ __forceinline__ void halve(float (&a)[VP], int lane) {
  if constexpr (N > 1) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float send = hi ? a[i] : a[i + N / 2];
      const float keep = hi ? a[i + N / 2] : a[i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    halve<N / 2, O / 2, VP>(a, lane);
  }
}

// Sums a[0:VP] over the warp; lane l ends with the sum of a[l >> (5 - log2 VP)].
template <int VP>
__device__ __forceinline__ float reduce_scatter(float (&a)[VP], int lane) {
  constexpr int kLog = log2_exact(VP);
  halve<VP, 16, VP>(a, lane);
  float v = a[0];
#pragma unroll
  for (int o = 16 >> kLog; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// What a kernel does besides y = x w^T (Gemv::Variant): kPlain stages x as given; kNorm
// stages rmsnorm(x [+ add]) (norm_stage); kNormSilu also pairs each warp's gate and up rows
// and writes bf16(bf16(silu(g)) * u) instead of y; kNormRope is kNorm whose CTAs, in clusters
// owning one head each, finish the head with q/k norm + RoPE + the KV write (rope_epilogue);
// kRopePairs is kNorm whose warps own both rows of RoPE pairs (heads without q/k norms,
// rotated whole) and rotate and store them (rope_pair_store).
constexpr int kPlain = 0, kNorm = 1, kNormSilu = 2, kNormRope = 3, kRopePairs = 4;

// How a warp's R weight rows are chosen (weight_row): kRows, R consecutive rows; kHalves,
// kNormSilu's gate / up pairs (rows j and n/2 + j); kRotations, kRopePairs' rotation pairs
// (a head's elements ia and ib of pair_of, cuda_rope_math.cuh).
constexpr int kRows = 0, kHalves = 1, kRotations = 2;

// One params struct for the three variants (fields a variant does not use are ignored).
struct Params {
  const __nv_bfloat16* x;  // kPlain: x [rows, ldx]; kNorm*: the residual [rows, k]
  int64_t ldx;
  const __nv_bfloat16* add;     // kNorm*: added to x first, or null
  const __nv_bfloat16* norm_w;  // kNorm*: the norm's weight [k]
  float eps;
  __nv_bfloat16* x_out;  // kNorm*: bf16(x + add) written by CTA 0, or null
  __nv_bfloat16* h_out;  // kNorm*: the normalised rows written by CTA 0, or null
  const __nv_bfloat16* w;  // [n, k]; kNormSilu: gate rows [0, n/2), up rows [n/2, n)
  int n, k;
  __nv_bfloat16* y;  // [rows, ldy]: y, or kNormSilu's act [rows, n/2]
  int64_t ldy;
  int ks, tiles, prefetch;
  // kNormRope: the step's q/k norm + RoPE (rope.qkv == y, rope.ld == ldy) and KV write; a
  // cluster of `cluster` CTAs (one tile each, rows_per_tile rows a tile) owns one head.
  RopeParams rope;
  CacheParams cache;
  int cache_fp8;  // the caches hold e4m3 codes (else bf16)
  int cluster, rows_per_tile;
};

// The weight row a warp's r-th row is, for tile `tile` and row group g. kRows: R consecutive
// rows. kHalves (kNormSilu): R/2 consecutive features j0.., rows j (gate) then n/2 + j (up).
// kRotations (kRopePairs): R/2 consecutive rotation pairs j0..; pair j is pair i = j % (D/2)
// of head j / (D/2), rows head * D + ia (r < R/2) and head * D + ib (pair_of). Returns -1
// past the end.
template <int R, int Pair>
__device__ __forceinline__ int weight_row(const Params& p, int tile, int g, int r) {
  const int groups = kWarps / p.ks;
  if constexpr (Pair != kRows) {
    constexpr int P = R / 2;
    const int half = p.n >> 1;
    const int j = tile * groups * P + g * P + (r % P);
    if (j >= half) return -1;
    if constexpr (Pair == kHalves) {
      return r < P ? j : half + j;
    } else {
      const int D = p.rope.head_dim;
      const int head = j / (D >> 1);
      int ia, ib;
      pair_of(j - head * (D >> 1), D, p.rope.interleaved != 0, ia, ib);
      return head * D + (r < P ? ia : ib);
    }
  } else {
    const int row = tile * groups * R + g * R + r;
    return row < p.n ? row : -1;
  }
}

// Under PDL (prefetch != 0): the CTA's first tile of weight rows is requested into L2 before
// the grid-dependency wait, while the previous kernel finishes. The weights are written by no
// kernel of a step, so touching them before the wait is safe (cuda_launch.h's contract
// concerns data a previous kernel produces); x, which the previous kernel writes, is read
// only after pdl_enter.
template <int R, int Pair>
__device__ __forceinline__ void prefetch_first_tile(const Params& p) {
  const int tile = blockIdx.x;
  if (tile >= p.tiles) return;
  const int rows_per_tile = (kWarps / p.ks) * R;
  const int lines = (p.k * 2 + 127) / 128;  // a row's 128-byte lines (k % 8 == 0)
  for (int i = threadIdx.x; i < rows_per_tile * lines; i += kThreads) {
    const int q = i / lines;
    const int row = weight_row<R, Pair>(p, tile, q / R, q % R);
    if (row >= 0) prefetch_l2(p.w + int64_t{row} * p.k + int64_t{i - q * lines} * 64);
  }
}

__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// Chunks a thread of norm_stage loads before it uses the first (latency, not order).
constexpr int kNormBatch = 4;

// kNorm*: the norm weight's 16-byte chunks of this thread's first pass of norm_stage's last
// loop (elements i = tid + u * kThreads < M * C, chunk i % C). Weights: read before the
// grid-dependency wait, so this DRAM round trip (the weights of a layer's norm leave L2
// between two tokens) overlaps the previous kernel instead of following the reduction.
template <int M>
__device__ __forceinline__ void load_norm_weight(const Params& p, uint4 (&g)[kNormBatch]) {
  const int C = p.k >> 3;
#pragma unroll
  for (int u = 0; u < kNormBatch; ++u) {
    const int i = threadIdx.x + u * kThreads;
    if (i < M * C) g[u] = *reinterpret_cast<const uint4*>(p.norm_w + int64_t{i % C} * 8);
  }
}

// kNorm*: xs[m] = rmsnorm(x[m] (+ add[m])) * norm_w for m < M, as add_rmsnorm_kernel
// (cuda_kernels.cu, 256 threads) computes it, bit for bit: v = bf16(x + add) per element;
// thread t sums v * v over elements t, t + 256, ... in order (the same fma); the warp sum
// (xor 16 .. 1) and the block sum of the 8 warp sums (block_sum: lanes 0-7 of one warp, zeros
// above, xor 16 .. 1); inv = rsqrt(ss / hidden + eps); out = bf16(w * bf16(v * inv)). `red`
// holds the M x 8 warp sums and the M inverses. `first`: load_norm_weight's chunks.
template <int M>
__device__ __forceinline__ void norm_stage(const Params& p, uint4* xs, float* red,
                                           const uint4 (&first)[kNormBatch]) {
  constexpr int B = kNormBatch;
  const int C = p.k >> 3;
  const int MC = M * C;
  const bool writer = blockIdx.x == 0;
  for (int i0 = threadIdx.x; i0 < MC; i0 += B * kThreads) {
    uint4 xv[B], av[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u * kThreads;
      if (i < MC) {
        const int m = i / C;
        const int64_t off = int64_t{m} * p.k + int64_t{i - m * C} * 8;
        xv[u] = *reinterpret_cast<const uint4*>(p.x + off);
        if (p.add != nullptr) av[u] = *reinterpret_cast<const uint4*>(p.add + off);
      }
    }
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= MC) break;
      uint4 v = xv[u];
      if (p.add != nullptr) {
        float a[8], b[8];
        to_f8(v, a);
        to_f8(av[u], b);
#pragma unroll
        for (int e = 0; e < 8; ++e) a[e] = a[e] + b[e];
        v = pack8(a);  // bf16(x + add), rounded once as add_rmsnorm's r(v + add)
        if (writer && p.x_out != nullptr) {
          const int m = i / C;
          *reinterpret_cast<uint4*>(p.x_out + int64_t{m} * p.k + int64_t{i - m * C} * 8) = v;
        }
      }
      xs[i] = v;
    }
  }
  __syncthreads();
  const __nv_bfloat16* xh = reinterpret_cast<const __nv_bfloat16*>(xs);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < p.k; i += kThreads) {
      const float v = __bfloat162float(xh[m * p.k + i]);
      ss += v * v;
    }
    ss = warp_sum(ss);
    if (lane == 0) red[m * kWarps + warp] = ss;
  }
  __syncthreads();
  if (warp < M) {
    float v = lane < kWarps ? red[warp * kWarps + lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) red[M * kWarps + warp] = rsqrtf(v / static_cast<float>(p.k) + p.eps);
  }
  __syncthreads();
  for (int i0 = threadIdx.x; i0 < MC; i0 += B * kThreads) {
    uint4 gv[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u * kThreads;
      if (i0 == static_cast<int>(threadIdx.x)) {
        gv[u] = first[u];  // loaded before the wait (unused where i >= MC)
      } else if (i < MC) {
        gv[u] = *reinterpret_cast<const uint4*>(p.norm_w + int64_t{i - (i / C) * C} * 8);
      }
    }
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= MC) break;
      const int m = i / C;
      const float inv = red[M * kWarps + m];
      float v[8], g[8];
      to_f8(xs[i], v);
      to_f8(gv[u], g);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = g[e] * round_bf16(v[e] * inv);
      const uint4 h = pack8(v);
      xs[i] = h;
      if (writer && p.h_out != nullptr)
        *reinterpret_cast<uint4*>(p.h_out + int64_t{m} * p.k + int64_t{i - m * C} * 8) = h;
    }
  }
  __syncthreads();  // red is reused by the K-split reduction
}

// k::silu_mul's formula on the bf16-rounded GEMM outputs.
__device__ __forceinline__ __nv_bfloat16 silu_mul(float gate_sum, float up_sum) {
  const float g = round_bf16(gate_sum);
  const float u = round_bf16(up_sum);
  return __float2bfloat16(round_bf16(g / (1.0f + expf(-g))) * u);
}

// kNormRope, after every tile: the cluster's CTAs hold their rows of one head (ys: bf16,
// [M][rows_per_tile], as the plain kernel would have stored them in y); warp w of rank q takes
// token m = q + cluster * w, gathers the head's D values from the ranks' ys (distributed shared
// memory), and runs qk_norm_rope_token_kernel's arithmetic on it (cuda_rope_math.cuh: norm_row,
// rope_cos_sin, rotate; store_cache8): q and k heads normed and rotated, the row written to y
// (v rows as summed), k and v rows into the paged caches at slot[m] (< 0: a pad row, nothing
// stored; >= num_slots: skipped and recorded in the fault word). So y and the caches hold the
// bits run_rmsnorm + qk_norm_rope_store_kv leave.
template <int M>
__device__ __forceinline__ void rope_epilogue(const Params& p, const __nv_bfloat16* ys,
                                              __nv_bfloat16* hs) {
#if KVATTN_GEMV_CLUSTERS
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __syncthreads();
  cluster.sync();  // every rank's ys is complete and visible
  const RopeParams& rp = p.rope;
  const CacheParams& c = p.cache;
  const int D = rp.head_dim, rpt = p.rows_per_tile;
  const int rank = static_cast<int>(cluster.block_rank());
  const int head = static_cast<int>(blockIdx.x) / p.cluster;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool is_q = head < rp.num_heads;
  const bool is_v = head >= rp.num_heads + rp.num_kv_heads;
  for (int m = rank + p.cluster * warp; m < M; m += p.cluster * kWarps) {
    __nv_bfloat16* row = hs + m * D;
    for (int e = lane; e < D; e += 32) {
      const __nv_bfloat16* src = cluster.map_shared_rank(ys, e / rpt);
      row[e] = src[m * rpt + e % rpt];
    }
    __syncwarp();
    if (!is_v) {
      if (rp.q_norm != nullptr) norm_row(row, is_q ? rp.q_norm : rp.k_norm, rp.eps, D, lane);
      const float pos = static_cast<float>(rp.positions[m]);
      const float base = rope_base(rp, m);
      const int R = rp.rotary_dim;  // partial rotary: the dims past R stay as normed
      for (int i = lane; i < R / 2; i += 32) {
        float cs, sn;
        rope_cos_sin(i, R, pos, base, rp.inv_freq, rp.attention_factor, cs, sn);
        int ia, ib;
        pair_of(i, R, rp.interleaved != 0, ia, ib);
        rotate(f(row[ia]), f(row[ib]), cs, sn, row[ia], row[ib]);
      }
      __syncwarp();
    }
    __nv_bfloat16* out = p.y + m * p.ldy + static_cast<int64_t>(head) * D;
    for (int v = lane; v < D / 8; v += 32) {
      *reinterpret_cast<int4*>(out + 8 * v) = *reinterpret_cast<const int4*>(row + 8 * v);
    }
    if (is_q) continue;
    const int kvh = head - rp.num_heads - (is_v ? rp.num_kv_heads : 0);
    const int64_t slot = c.slots[m];
    if (slot >= c.num_slots) {
      if (!is_v && kvh == 0 && lane == 0) cuda::record_fault(c.fault_word, kFaultSlotOutOfRange);
      continue;
    }
    if (slot < 0) continue;
    const int64_t block = slot / c.block_size;
    const int64_t at = (slot - block * c.block_size) * rp.num_kv_heads * D +
                       static_cast<int64_t>(kvh) * D;
    const float* scales = is_v ? c.v_scale : c.k_scale;
    void* base_ptr = is_v ? c.v_cache : c.k_cache;
    const int64_t stride = is_v ? c.v_block_stride : c.k_block_stride;
    if (p.cache_fp8 != 0) {
      const float scale = scales != nullptr ? __ldg(scales + kvh) : 1.0f;
      uint8_t* dst = static_cast<uint8_t*>(base_ptr) + block * stride + at;
      for (int v = lane; v < D / 8; v += 32) store_cache8(dst + 8 * v, row + 8 * v, scale);
    } else {
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(base_ptr) + block * stride + at;
      for (int v = lane; v < D / 8; v += 32) store_cache8(dst + 8 * v, row + 8 * v, 1.0f);
    }
  }
  cluster.sync();  // no rank leaves while another still reads its ys
#else
  (void)p, (void)ys, (void)hs;
  __trap();  // never launched below sm_90 (run_rmsnorm_rope_kv)
#endif
}

// kRopePairs: token m's sums of rows ra and rb, a rotation pair of one head (weight_row's
// kRotations). qk_norm_rope_store_kv's arithmetic on them (heads without norms: rope_pair on
// the bf16-rounded sums): q and k pairs rotated, v pairs as summed; both elements written to
// y, and k and v ones to the caches at slot[m] (< 0: a pad row, nothing stored; >= num_slots:
// skipped and recorded in the fault word). So y and the caches hold the bits run_rmsnorm +
// qk_norm_rope_store_kv leave.
__device__ __forceinline__ void rope_pair_store(const Params& p, int m, int ra, int rb,
                                                float sum_a, float sum_b) {
  const RopeParams& rp = p.rope;
  const int D = rp.head_dim;
  const int head = ra / D;
  const bool is_q = head < rp.num_heads;
  const bool is_v = head >= rp.num_heads + rp.num_kv_heads;
  bf16 oa = __float2bfloat16_rn(sum_a), ob = __float2bfloat16_rn(sum_b);
  const int ia = ra - head * D, ib = rb - head * D;
  if (!is_v) {
    const int i = rp.interleaved != 0 ? ia >> 1 : ia;
    float cs, sn;
    rope_cos_sin(i, D, static_cast<float>(rp.positions[m]), rope_base(rp, m), rp.inv_freq,
                 rp.attention_factor, cs, sn);
    rotate(f(oa), f(ob), cs, sn, oa, ob);
  }
  p.y[m * p.ldy + ra] = oa;
  p.y[m * p.ldy + rb] = ob;
  if (is_q) return;
  const CacheParams& c = p.cache;
  const int kvh = head - rp.num_heads - (is_v ? rp.num_kv_heads : 0);
  const int64_t slot = c.slots[m];
  if (slot >= c.num_slots) {
    if (!is_v) cuda::record_fault(c.fault_word, kFaultSlotOutOfRange);
    return;
  }
  if (slot < 0) return;
  const int64_t block = slot / c.block_size;
  const int64_t at = (slot - block * c.block_size) * rp.num_kv_heads * D +
                     static_cast<int64_t>(kvh) * D;
  void* base_ptr = is_v ? c.v_cache : c.k_cache;
  const int64_t stride = is_v ? c.v_block_stride : c.k_block_stride;
  if (p.cache_fp8 != 0) {
    const float* scales = is_v ? c.v_scale : c.k_scale;
    const float scale = scales != nullptr ? __ldg(scales + kvh) : 1.0f;
    uint8_t* dst = static_cast<uint8_t*>(base_ptr) + block * stride + at;
    dst[ia] = to_cache<uint8_t>(oa, scale);
    dst[ib] = to_cache<uint8_t>(ob, scale);
  } else {
    bf16* dst = static_cast<bf16*>(base_ptr) + block * stride + at;
    dst[ia] = oa;
    dst[ib] = ob;
  }
}

template <int M, int R, int V>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const __grid_constant__ Params p) {
  using S = Shape<M, R>;
  constexpr int U = S::kUnroll;
  constexpr int kPair = V == kNormSilu ? kHalves : V == kRopePairs ? kRotations : kRows;
  constexpr int P = kPair != kRows ? R / 2 : R;  // outputs per warp and row of x
  uint4 norm_w_first[kNormBatch];
  if constexpr (V != kPlain) load_norm_weight<M>(p, norm_w_first);
  if (p.prefetch != 0) prefetch_first_tile<R, kPair>(p);
  pdl_enter();
  extern __shared__ uint4 smem[];
  const int n = p.n, k = p.k, ks = p.ks;
  const int C = k >> 3;  // 16-byte chunks per row
  uint4* xs = smem;
  float* red = reinterpret_cast<float*>(smem + M * C);
  // kNormRope: the tile's rows (bf16 [M][rows_per_tile]), then a row a token for the epilogue.
  __nv_bfloat16* ys = reinterpret_cast<__nv_bfloat16*>(smem + M * C + kRedBytes / 16);
  __nv_bfloat16* hs = ys + (M * p.rows_per_tile + 7) / 8 * 8;

  if constexpr (V == kPlain) {
    for (int i = threadIdx.x; i < M * C; i += kThreads) {
      const int m = i / C;
      const int c = i - m * C;
      xs[i] = *reinterpret_cast<const uint4*>(p.x + m * p.ldx + int64_t{c} * 8);
    }
    __syncthreads();
  } else {
    norm_stage<M>(p, xs, red, norm_w_first);
  }

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int s = warp % ks;  // k slice
  const int g = warp / ks;  // row group
  const int groups = kWarps / ks;
  const int stride = 32 * ks;
  const int c0 = s * 32 + lane;
  const int owner_shift = 5 - S::kLog;
  const int idx = lane >> owner_shift;  // the sum this lane ends with
  const bool owner = (lane & ((1 << owner_shift) - 1)) == 0 && idx < S::kV;

  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = weight_row<R, kPair>(p, tile, g, r);
      // Past the end: a valid row (its sums are dropped), so the loads stay in bounds.
      const int safe = row >= 0 ? row : (kPair == kHalves ? (r < R / 2 ? 0 : n >> 1) : n - 1);
      wr[r] = reinterpret_cast<const uint4*>(p.w + int64_t{safe} * k);
    }

    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

    for (int c = c0; c < C; c += U * stride) {
      uint4 wv[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int cc = c + u * stride;
#pragma unroll
        for (int r = 0; r < R; ++r)
          wv[u][r] = cc < C ? ld_stream(wr[r] + cc) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int cc = c + u * stride;
        if (cc < C) {
          float wf[R][8];
#pragma unroll
          for (int r = 0; r < R; ++r) to_f8(wv[u][r], wf[r]);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float xf[8];
            to_f8(xs[m * C + cc], xf);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[r][m] = fmaf(wf[r][e], xf[e], acc[r][m]);
          }
        }
      }
    }

    float a[S::kVP];
#pragma unroll
    for (int v = 0; v < S::kVP; ++v) a[v] = v < S::kV ? acc[v / M][v % M] : 0.0f;
    const float sum = reduce_scatter<S::kVP>(a, lane);

    if (ks == 1) {
      const int r = idx / M, m = idx % M;
      if constexpr (kPair != kRows) {
        // The pair's other sum (up, or the rotation partner) of the same row of x: index
        // idx + P * M, on another lane.
        const int src = min(idx + P * M, S::kVP - 1) << owner_shift;
        const float other = __shfl_sync(0xffffffffu, sum, src);
        const int row = weight_row<R, kPair>(p, tile, g, r);
        if (owner && r < P && row >= 0) {
          if constexpr (V == kRopePairs) {
            rope_pair_store(p, m, row, weight_row<R, kPair>(p, tile, g, r + P), sum, other);
          } else {
            p.y[m * p.ldy + row] = silu_mul(sum, other);
          }
        }
      } else {
        const int row = weight_row<R, kRows>(p, tile, g, r);
        if (owner && row >= 0) {
          if constexpr (V == kNormRope) {
            ys[m * p.rows_per_tile + g * R + r] = __float2bfloat16_rn(sum);
          } else {
            p.y[m * p.ldy + row] = __float2bfloat16_rn(sum);
          }
        }
      }
    } else {
      if (owner) red[warp * S::kVP + idx] = sum;
      __syncthreads();
      for (int t = threadIdx.x; t < groups * P * M; t += kThreads) {
        const int gg = t / (P * M);
        const int i = t - gg * (P * M);  // r * M + m, r < P
        float total = 0.0f;
        for (int ss = 0; ss < ks; ++ss) total += red[(gg * ks + ss) * S::kVP + i];
        const int row = weight_row<R, kPair>(p, tile, gg, i / M);
        if (row < 0) continue;
        if constexpr (kPair != kRows) {
          float other = 0.0f;
          for (int ss = 0; ss < ks; ++ss) other += red[(gg * ks + ss) * S::kVP + i + P * M];
          if constexpr (V == kRopePairs) {
            rope_pair_store(p, i % M, row, weight_row<R, kPair>(p, tile, gg, i / M + P), total,
                            other);
          } else {
            p.y[(i % M) * p.ldy + row] = silu_mul(total, other);
          }
        } else if constexpr (V == kNormRope) {
          ys[(i % M) * p.rows_per_tile + gg * R + i / M] = __float2bfloat16_rn(total);
        } else {
          p.y[(i % M) * p.ldy + row] = __float2bfloat16_rn(total);
        }
      }
      __syncthreads();  // red is reused by the next tile
    }
  }
  if constexpr (V == kNormRope) rope_epilogue<M>(p, ys, hs);
}

using Kernel = void (*)(const Params);

template <int V, int R, int... Ms>
constexpr std::array<Kernel, Gemv::kMaxRows> row_kernels(std::integer_sequence<int, Ms...>) {
  return {gemv_kernel<Ms + 1, R, V>...};
}
template <int V, int R>
constexpr auto kRowKernels = row_kernels<V, R>(std::make_integer_sequence<int, Gemv::kMaxRows>{});

// kNormRope, kRopePairs: built for the fused path's rows only (Gemv::kFusedPreferredRows).
template <int V, int R, int... Ms>
constexpr std::array<Kernel, Gemv::kFusedPreferredRows> rope_kernels(
    std::integer_sequence<int, Ms...>) {
  return {gemv_kernel<Ms + 1, R, V>...};
}
template <int V, int R>
constexpr auto kRopeKernels =
    rope_kernels<V, R>(std::make_integer_sequence<int, Gemv::kFusedPreferredRows>{});

// [variant][rows per warp 2 or 4][rows - 1]; null where no kernel is built.
Kernel kernel_for(int v, int R, int64_t rows) {
  const size_t m = static_cast<size_t>(rows - 1);
  switch (v * 2 + (R == 4 ? 1 : 0)) {
    case 0: return kRowKernels<kPlain, 2>[m];
    case 1: return kRowKernels<kPlain, 4>[m];
    case 2: return kRowKernels<kNorm, 2>[m];
    case 3: return kRowKernels<kNorm, 4>[m];
    case 4: return kRowKernels<kNormSilu, 2>[m];
    case 5: return kRowKernels<kNormSilu, 4>[m];
    case 6: return m < kRopeKernels<kNormRope, 2>.size() ? kRopeKernels<kNormRope, 2>[m] : nullptr;
    case 7: return m < kRopeKernels<kNormRope, 4>.size() ? kRopeKernels<kNormRope, 4>[m] : nullptr;
    case 8: return m < kRopeKernels<kRopePairs, 2>.size() ? kRopeKernels<kRopePairs, 2>[m] : nullptr;
    default:
      return m < kRopeKernels<kRopePairs, 4>.size() ? kRopeKernels<kRopePairs, 4>[m] : nullptr;
  }
}

}  // namespace

Gemv::Gemv(int device) {
  cuda::DeviceGuard guard(device);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sms_ = prop.multiProcessorCount;
  smem_optin_ = prop.sharedMemPerBlockOptin;
  smem_per_sm_ = prop.sharedMemPerMultiprocessor;
  clusters_ = prop.major >= 9;
  for (int v = 0; v < kVariants; ++v) {
    for (int ri = 0; ri < 2; ++ri) {
      for (int m = 0; m < kMaxRows; ++m) {
        const Kernel kern = kernel_for(v, ri == 0 ? 2 : 4, m + 1);
        if (kern == nullptr) continue;
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem_optin_)));
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, kern));
        regs_[v][ri][m] = std::max(attr.numRegs, 1);
      }
    }
  }
}

Gemv::Mode Gemv::env_mode() {
  static const Mode mode = [] {
    const char* e = std::getenv("KVATTN_GEMV");
    // The H200-measured rule (preferred()) unless asked otherwise; the rewritten kernel
    // (session 11) passed its GPU tests in session 12 and beat the old one (qkv, 1 row: 4.34
    // vs 5.52 us).
    if (e != nullptr && (std::strcmp(e, "off") == 0 || std::strcmp(e, "0") == 0)) return Mode::kOff;
    if (e != nullptr && std::strcmp(e, "all") == 0) return Mode::kAll;
    return Mode::kAuto;
  }();
  return mode;
}

bool Gemv::preferred(int64_t rows, int64_t n, int64_t /*k*/) {
  return rows >= 1 && rows <= kMaxRows && (n <= 2048 || (n >= 65536 && rows <= 4));
}

Gemv::Split Gemv::split(int64_t n, int64_t k) const {
  // K split: the fewest warps per row group that still gives two CTAs per SM with 4 rows per
  // warp, as long as each warp gets at least one 16-byte chunk of each row per lane.
  const int64_t chunks = k / 8;
  int ks = 1;
  auto tiles_for = [&](int s) {
    const int64_t per = (kWarps / s) * 4;
    return (n + per - 1) / per;
  };
  while (ks < kWarps && tiles_for(ks) < 2 * sms_ && chunks >= 32 * (ks * 2)) ks *= 2;
  if (ks > 1 && rule_ == SplitRule::kDefault && (n + 15) / 16 >= sms_) return {2, 1};
  return {4, ks};
}

bool Gemv::run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
               void* y, int64_t ldy, Launch on) const {
  if (rows < 1 || rows > kMaxRows || n < 1 || k < 8 || k % 8 != 0 || ldx % 8 != 0) return false;
  if (n > (int64_t{1} << 30) || k > (int64_t{1} << 30)) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return false;
  if (static_cast<size_t>(rows * k) * 2 + kRedBytes > smem_optin_) return false;
  launch(kPlain, NormInput{}, x, ldx, rows, w, n, k, y, ldy, on);
  return true;
}

bool Gemv::fused_supported(int64_t rows, int64_t hidden) const {
  return rows >= 1 && rows <= kMaxRows && hidden >= 8 && hidden % 8 == 0 &&
         hidden <= (int64_t{1} << 24) &&
         static_cast<size_t>(rows * hidden) * 2 + kRedBytes <= smem_optin_;
}

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The fused entries' argument checks (kvattn::Error naming the argument).
void check_fused(const char* who, const Gemv& gemv, const Gemv::NormInput& in, int64_t rows,
                 int64_t hidden, const void* w, int64_t n, const void* y) {
  KVATTN_CHECK(rows >= 1 && rows <= Gemv::kMaxRows, who, ": rows must be in [1, ",
               Gemv::kMaxRows, "] but is ", rows);
  KVATTN_CHECK(hidden >= 8 && hidden % 8 == 0, who,
               ": hidden must be a positive multiple of 8 but is ", hidden);
  KVATTN_CHECK(gemv.fused_supported(rows, hidden), who, ": ", rows, " rows of hidden ", hidden,
               " do not fit in shared memory");
  KVATTN_CHECK(n >= 1 && n <= (int64_t{1} << 30), who, ": n must be in [1, 2^30] but is ", n);
  KVATTN_CHECK(in.x != nullptr && aligned16(in.x), who, ": x must be a 16-byte aligned pointer");
  KVATTN_CHECK(in.add == nullptr || aligned16(in.add), who, ": add must be 16-byte aligned");
  KVATTN_CHECK(in.weight != nullptr && aligned16(in.weight), who,
               ": the norm weight must be a 16-byte aligned pointer");
  KVATTN_CHECK(in.x_out == nullptr || (aligned16(in.x_out) && in.x_out != in.x &&
                                       in.x_out != in.add),
               who, ": x_out must be 16-byte aligned and neither x nor add (other CTAs read them)");
  KVATTN_CHECK(in.h_out == nullptr || aligned16(in.h_out), who, ": h_out must be 16-byte aligned");
  KVATTN_CHECK(w != nullptr && aligned16(w), who, ": w must be a 16-byte aligned pointer");
  KVATTN_CHECK(y != nullptr, who, ": the output must not be null");
}

// The launch parameters every variant shares (tiles and the kNormRope fields are the caller's).
Params params(const Gemv::NormInput& in, const void* x, int64_t ldx, const void* w, int64_t n,
              int64_t k, void* y, int64_t ldy, Gemv::Split sp, Launch on) {
  Params p{};
  p.x = static_cast<const __nv_bfloat16*>(x);
  p.ldx = ldx;
  p.add = static_cast<const __nv_bfloat16*>(in.add);
  p.norm_w = static_cast<const __nv_bfloat16*>(in.weight);
  p.eps = in.eps;
  p.x_out = static_cast<__nv_bfloat16*>(in.x_out);
  p.h_out = static_cast<__nv_bfloat16*>(in.h_out);
  p.w = static_cast<const __nv_bfloat16*>(w);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.y = static_cast<__nv_bfloat16*>(y);
  p.ldy = ldy;
  p.ks = sp.ks;
  p.prefetch = on.pdl ? 1 : 0;
  return p;
}

}  // namespace

void Gemv::run_rmsnorm(const NormInput& in, int64_t rows, int64_t hidden, const void* w,
                       int64_t n, void* y, int64_t ldy, Launch on) const {
  check_fused("Gemv::run_rmsnorm", *this, in, rows, hidden, w, n, y);
  KVATTN_CHECK(ldy >= n, "Gemv::run_rmsnorm: ldy must be >= n = ", n, " but is ", ldy);
  launch(kNorm, in, in.x, hidden, rows, w, n, hidden, y, ldy, on);
}

void Gemv::run_rmsnorm_silu(const NormInput& in, int64_t rows, int64_t hidden,
                            const void* w_gate_up, int64_t inter, void* act, int64_t ldact,
                            Launch on) const {
  check_fused("Gemv::run_rmsnorm_silu", *this, in, rows, hidden, w_gate_up, 2 * inter, act);
  KVATTN_CHECK(inter >= 1, "Gemv::run_rmsnorm_silu: inter must be positive but is ", inter);
  KVATTN_CHECK(ldact >= inter, "Gemv::run_rmsnorm_silu: ldact must be >= inter = ", inter,
               " but is ", ldact);
  launch(kNormSilu, in, in.x, hidden, rows, w_gate_up, 2 * inter, hidden, act, ldact, on);
}

namespace {

// The two RoPE epilogues' argument checks (check_fused's, the RoPE rows being the GEMV's
// output, n the heads' width, then rope_params' and cache_params'; kvattn::Error naming `fn`'s
// argument); their typed parameters.
std::pair<RopeParams, CacheParams> check_rope_kv(std::string_view fn, const Gemv& gemv,
                                                 const Gemv::NormInput& in, int64_t rows,
                                                 int64_t hidden, const void* w, int64_t n,
                                                 const void* y, int64_t ldy,
                                                 const QkNormRope& rope, const KVWrite& kv) {
  check_fused(fn.data(), gemv, in, rows, hidden, w, n, y);
  const int64_t D = rope.head_dim;
  KVATTN_CHECK(rope.qkv == y && rope.ld == ldy && rope.tokens == rows, fn,
               ": the RoPE rows must be the GEMV's output (qkv == y, ld == ldy, tokens == rows)");
  KVATTN_CHECK(D > 0 && n == (rope.num_heads + 2 * rope.num_kv_heads) * D, fn,
               ": n must be (num_heads + 2 num_kv_heads) * head_dim = ",
               (rope.num_heads + 2 * rope.num_kv_heads) * D, " but is ", n);
  KVATTN_CHECK(ldy >= n, fn, ": ldy must be >= n = ", n, " but is ", ldy);
  return {rope_params(rope), cache_params(rope, kv, fn)};
}

}  // namespace

bool Gemv::run_rmsnorm_rope_kv(const NormInput& in, int64_t rows, int64_t hidden, const void* w,
                               int64_t n, void* y, int64_t ldy, const QkNormRope& rope,
                               const KVWrite& kv, Launch on) const {
  constexpr std::string_view kFn = "Gemv::run_rmsnorm_rope_kv";
  const auto [rp, cp] = check_rope_kv(kFn, *this, in, rows, hidden, w, n, y, ldy, rope, kv);
  const int64_t D = rope.head_dim;
  // The cases the epilogue covers; the caller runs run_rmsnorm + qk_norm_rope_store_kv on the
  // others (the same bits).
  if (!clusters_ || legacy_kernels() || rows > kFusedPreferredRows) return false;
  if (D % 8 != 0 || ldy % 8 != 0 || !aligned16(y)) return false;
  const int64_t per_piece = kv.k_cache.dtype == DType::kBF16 ? 8 : 16;
  if (!aligned16(cp.k_cache) || !aligned16(cp.v_cache) || cp.k_block_stride % per_piece != 0 ||
      cp.v_block_stride % per_piece != 0) {
    return false;
  }
  const Split sp = split(n, hidden);
  const int64_t rpt = (kWarps / sp.ks) * sp.rows_per_warp;  // rows a tile (a CTA)
  if (D % rpt != 0 || D / rpt > 8) return false;              // a head: a portable cluster
  const size_t smem = rope_smem(rows, hidden, rpt, D);
  if (smem > smem_optin_) return false;

  Params p = params(in, in.x, hidden, w, n, hidden, y, ldy, sp, on);
  p.tiles = static_cast<int>(n / rpt);
  p.rope = rp;
  p.cache = cp;
  p.cache_fp8 = kv.k_cache.dtype == DType::kBF16 ? 0 : 1;
  p.cluster = static_cast<int>(D / rpt);
  p.rows_per_tile = static_cast<int>(rpt);
  // One tile a CTA: each cluster holds a head's rows at once.
  launch_kernel_clusters(kernel_for(kNormRope, sp.rows_per_warp, rows),
                         dim3(static_cast<unsigned>(p.tiles)), dim3(kThreads), smem, on,
                         static_cast<unsigned>(p.cluster), p);
  return true;
}

bool Gemv::run_rmsnorm_rope_pairs(const NormInput& in, int64_t rows, int64_t hidden,
                                  const void* w, int64_t n, void* y, int64_t ldy,
                                  const QkNormRope& rope, const KVWrite& kv, Launch on) const {
  constexpr std::string_view kFn = "Gemv::run_rmsnorm_rope_pairs";
  const auto [rp, cp] = check_rope_kv(kFn, *this, in, rows, hidden, w, n, y, ldy, rope, kv);
  // The cases the pairs cover; the caller runs run_rmsnorm + qk_norm_rope_store_kv on the
  // others (the same bits).
  if (legacy_kernels() || rows > kFusedPreferredRows) return false;
  if (rp.q_norm != nullptr || rp.k_norm != nullptr || rp.rotary_dim != rp.head_dim) return false;
  const Split sp = split(n, hidden);
  const int64_t pairs_per_tile = (kWarps / sp.ks) * sp.rows_per_warp / 2;
  const int64_t tiles = (n / 2 + pairs_per_tile - 1) / pairs_per_tile;
  const size_t smem = static_cast<size_t>(rows * hidden) * 2 + kRedBytes;
  Params p = params(in, in.x, hidden, w, n, hidden, y, ldy, sp, on);
  p.tiles = static_cast<int>(tiles);
  p.rope = rp;
  p.cache = cp;
  p.cache_fp8 = kv.k_cache.dtype == DType::kBF16 ? 0 : 1;
  const int64_t grid = resident_grid(kRopePairs, sp.rows_per_warp, rows, tiles, smem);
  launch_kernel(kernel_for(kRopePairs, sp.rows_per_warp, rows), static_cast<unsigned>(grid),
                kThreads, smem, on, p);
  return true;
}

size_t Gemv::rope_smem(int64_t rows, int64_t hidden, int64_t rows_per_tile, int64_t head_dim) {
  return static_cast<size_t>(rows * hidden) * 2 + kRedBytes +
         static_cast<size_t>((rows * rows_per_tile + 7) / 8 * 8 + rows * head_dim) * 2;
}

void Gemv::launch(Variant v, const NormInput& in, const void* x, int64_t ldx, int64_t rows,
                  const void* w, int64_t n, int64_t k, void* y, int64_t ldy, Launch on) const {
  const Split sp = split(n, k);
  // Tiles: kNormSilu's warps own R / 2 features (gate and up rows of each).
  const int64_t per_tile = (kWarps / sp.ks) * sp.rows_per_warp;
  const int64_t tiles = v == kNormSilu ? (n / 2 + per_tile / 2 - 1) / (per_tile / 2)
                                       : (n + per_tile - 1) / per_tile;
  const size_t smem = static_cast<size_t>(rows * k) * 2 + kRedBytes;
  const int64_t grid = resident_grid(v, sp.rows_per_warp, rows, tiles, smem);

  Params p = params(in, x, ldx, w, n, k, y, ldy, sp, on);
  p.tiles = static_cast<int>(tiles);
  launch_kernel(kernel_for(v, sp.rows_per_warp, rows), static_cast<unsigned>(grid), kThreads,
                smem, on, p);
}

int64_t Gemv::resident_grid(Variant v, int rows_per_warp, int64_t rows, int64_t tiles,
                            size_t smem) const {
  const int r = regs_[v][rows_per_warp == 4 ? 1 : 0][rows - 1];
  const int regs = (r + 7) / 8 * 8;
  int per_sm = std::min<int>(65536 / (regs * kThreads), 2048 / kThreads);
  per_sm = std::min<int>(per_sm, static_cast<int>(smem_per_sm_ / (smem + 1024)));
  per_sm = std::max(per_sm, 1);
  return std::min<int64_t>(tiles, int64_t{sms_} * per_sm);
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
