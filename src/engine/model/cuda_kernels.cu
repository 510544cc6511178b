// The GPU model's row kernels: embedding gather, add + RMSNorm, SiLU * up, bias add.
//
// Issue 20 (time to first token): at a 4,096-token prefill these ran at a third of the copy
// ceiling or less (docs/notes/engine-other-kernels.md has the numbers per kernel). The kernels
// before it, kept below as legacy_* and selectable (legacy_kernels()), moved 2 bytes per load,
// one element per thread: too few bytes in flight per SM for HBM3e (Little's law wants about
// 25 KB per SM; 2,048 threads x 2-4 B is 4-8 KB), and SiLU paid a 64-bit division per element.
// The kernels now:
// - norms: one warp per row, 16-byte loads issued all at once, the row held in registers
//   (as bf16: x + add is rounded to bf16 anyway) so x is read once, and no __syncthreads.
//   The sum of squares is the old 256-thread block_sum's, operation for operation: lane m
//   holds elements 8m + e + 256k, exactly the elements old thread j = 8m + e summed (fmaf over
//   k ascending); old lane bits 4 and 3 of j are lane bits 1 and 0 here (two shuffles), bits
//   2..0 are e (adds in registers), and the old 8-warp tree is the shuffles over lane bits
//   4, 3, 2. Same operands, same order: bit-identical x and out for every row.
// - SiLU * up and the bias add: eight elements a thread (16-byte loads and stores), one index
//   division per eight, the same float expressions per element (so the same bits).
// - embedding gather: 16-byte copies.
// Shapes the vector forms do not take (hidden or inter not a multiple of 8, misaligned
// pointers, hidden > 4096) use the legacy kernels, which give the same bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_bf16_math.cuh"
#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda_model {

namespace {
// -1: not read yet; then 0 or 1.
std::atomic<int> g_legacy{-1};
}  // namespace

bool legacy_kernels() {
  int v = g_legacy.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("KVATTN_LEGACY_KERNELS");
    v = e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;  // new kernels unless "1" (header)
    g_legacy.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_legacy_kernels(bool on) { g_legacy.store(on ? 1 : 0, std::memory_order_relaxed); }

namespace {

// ---- 16-byte vectors of eight bf16 ----

struct alignas(16) Vec8 {
  __nv_bfloat162 h[4];
};

// Through uint4, so that each is one 128-bit access (a struct copy of Vec8 compiles to four
// 32-bit ones).
__device__ __forceinline__ Vec8 as_vec8(uint4 u) {
  Vec8 v;
  static_assert(sizeof(v) == sizeof(u));
  __builtin_memcpy(&v, &u, sizeof(v));
  return v;
}
__device__ __forceinline__ Vec8 load8(const bf16* p) {
  return as_vec8(*reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ Vec8 load8_stream(const bf16* p) {  // read once: evict first
  return as_vec8(__ldcs(reinterpret_cast<const uint4*>(p)));
}
__device__ __forceinline__ void store8(bf16* p, const Vec8& v) {
  uint4 u;
  __builtin_memcpy(&u, &v, sizeof(u));
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ Vec8 zero8() {
  Vec8 v;
  const __nv_bfloat162 z = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = z;
  return v;
}
__device__ __forceinline__ float get(const Vec8& v, int e) {
  return e % 2 == 0 ? __low2float(v.h[e / 2]) : __high2float(v.h[e / 2]);
}
__device__ __forceinline__ void set(Vec8& v, int e, bf16 x) {
  if (e % 2 == 0) {
    v.h[e / 2].x = x;
  } else {
    v.h[e / 2].y = x;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- add + RMSNorm, one warp per row ----

constexpr int kRowWarps = 4;         // rows per CTA
constexpr int kLegacyThreads = 256;  // the legacy block size; the sum's order is pinned to it
constexpr int kMaxVecs = 16;         // hidden <= 16 * 256 = 4096 in registers

// Small rows (K <= kPrefetchVecs) take their weights in registers before the kernel's
// pdl_enter (NormWeights): weights are no kernel's output, the one exception cuda_launch.h's
// contract allows, so under PDL their L2 round trip overlaps the previous kernel's tail instead
// of following the sum of squares (a decode token runs 2 norms a layer).
constexpr int kPrefetchVecs = 4;

template <int K>
struct NormWeights {
  static constexpr bool kHeld = K <= kPrefetchVecs;
  Vec8 w[kHeld ? K : 1];
  __device__ __forceinline__ void prefetch(const bf16* __restrict__ wp, int hidden, int lane) {
    if constexpr (kHeld) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int i = 8 * lane + 256 * k;
        w[k] = i < hidden ? load8(wp + i) : zero8();
      }
    }
  }
  __device__ __forceinline__ Vec8 get(const bf16* __restrict__ wp, int k, int i) const {
    if constexpr (kHeld) {
      return w[k];
    } else {
      return load8(wp + i);
    }
  }
};

// One row: x = src (+ add, rounded), optionally written to x_out; out = w * bf16(x * inv).
// src == null: a row of zeros (an id outside the rank's vocab slice). K: 16-byte vectors per
// lane, >= ceil(hidden / 256); hidden % 8 == 0 and every pointer 16-byte aligned.
// src and x_out may be the same row (x += add in place): each element is read, then written,
// by the same lane, so neither is __restrict__.
template <int K>
__device__ __forceinline__ void rmsnorm_row(const bf16* src, const bf16* __restrict__ add,
                                            bf16* x_out, const bf16* __restrict__ w,
                                            const NormWeights<K>& nw, float eps,
                                            bf16* __restrict__ out, int hidden, int lane) {
  Vec8 v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = 8 * lane + 256 * k;
    v[k] = i < hidden && src != nullptr ? load8(src + i) : zero8();
  }
  if (add != nullptr) {
    Vec8 a[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = 8 * lane + 256 * k;
      a[k] = i < hidden ? load8(add + i) : zero8();
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int e = 0; e < 8; ++e) set(v[k], e, b(get(v[k], e) + get(a[k], e)));
    }
  }
  // Old thread j = 8 * lane + e: its fmaf chain over k (x + add is exact in bf16, so v holds
  // exactly the old float v).
  float c[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) c[e] = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = 8 * lane + 256 * k;
    if (i < hidden) {
      if (x_out != nullptr) store8(x_out + i, v[k]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float x = get(v[k], e);
        c[e] = fmaf(x, x, c[e]);
      }
    }
  }
  // The old warp butterfly over j % 32 = 8 * (lane % 4) + e: xor 16 and 8 across lanes, then
  // xor 4, 2, 1 within e.
#pragma unroll
  for (int e = 0; e < 8; ++e) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 2);
#pragma unroll
  for (int e = 0; e < 8; ++e) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 1);
  float s = ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]));
  // The old tree over its 8 warps (j / 32 = lane / 4); the old xor 16 and 8 added zeros.
  s += __shfl_xor_sync(0xffffffffu, s, 16);
  s += __shfl_xor_sync(0xffffffffu, s, 8);
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  const float inv = rsqrtf(s / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = 8 * lane + 256 * k;
    if (i < hidden) {
      const Vec8 wk = nw.get(w, k, i);
      Vec8 o;
#pragma unroll
      for (int e = 0; e < 8; ++e) set(o, e, b(get(wk, e) * r(get(v[k], e) * inv)));
      store8(out + i, o);
    }
  }
}

template <int K>
__global__ void __launch_bounds__(32 * kRowWarps)
    add_rmsnorm_kernel(bf16* __restrict__ x, const bf16* __restrict__ add,
                       const bf16* __restrict__ w, float eps, bf16* __restrict__ out,
                       const int32_t* __restrict__ rows, int64_t num_rows, int hidden) {
  NormWeights<K> nw;
  nw.prefetch(w, hidden, threadIdx.x & 31);
  pdl_enter();
  const int64_t r_out = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
  if (r_out >= num_rows) return;
  const int64_t row = rows != nullptr ? rows[r_out] : r_out;
  const bool write_back = rows == nullptr && add != nullptr;
  rmsnorm_row<K>(x + row * hidden, add != nullptr ? add + row * hidden : nullptr,
                 write_back ? x + row * hidden : nullptr, w, nw, eps, out + r_out * hidden,
                 hidden, threadIdx.x & 31);
}

template <int K>
__global__ void __launch_bounds__(32 * kRowWarps, 1)
    embed_rmsnorm_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids,
                         int64_t tokens, int64_t first_id, int64_t num_ids,
                         const bf16* __restrict__ w, float eps, bf16* __restrict__ x,
                         bf16* __restrict__ out, int hidden) {
  NormWeights<K> nw;
  nw.prefetch(w, hidden, threadIdx.x & 31);
  pdl_enter();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
  if (t >= tokens) return;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  const bf16* src = local < 0 || local >= num_ids ? nullptr : table + local * hidden;
  rmsnorm_row<K>(src, nullptr, x + t * hidden, w, nw, eps, out + t * hidden, hidden,
                 threadIdx.x & 31);
}

// The vector form's K for `hidden`, or 0 when it takes the legacy kernel.
int row_vecs(int64_t hidden) {
  if (hidden <= 0 || hidden % 8 != 0 || hidden > 256 * kMaxVecs) return 0;
  const int k = static_cast<int>((hidden + 255) / 256);
  for (int c : {1, 2, 3, 4, 8, 16}) {
    if (k <= c) return c;
  }
  return 0;
}

// Calls f(std::integral_constant<int, K>{}) for row_vecs' K.
template <typename F>
void dispatch_vecs(int k, F&& f) {
  switch (k) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

unsigned row_blocks(int64_t rows) {
  const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
  KVATTN_CHECK(blocks <= 0x7fffffff, "cuda model: ", rows, " rows exceed one launch");
  return static_cast<unsigned>(blocks);
}

// ---- elementwise, eight elements a thread ----

// out[t, i] = bf16(bf16(silu(g)) * u): the legacy kernel's expression, term for term.
__device__ __forceinline__ bf16 silu_mul1(float g, float u) {
  return b(r(g / (1.0f + expf(-g))) * u);
}

template <typename Index>
__global__ void silu_mul_kernel(const bf16* __restrict__ gate_up, Index vecs, Index row_vecs8,
                                int64_t inter, bf16* __restrict__ out) {
  pdl_enter();
  for (Index v = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; v < vecs;
       v += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index t = v / row_vecs8;
    const int64_t j = static_cast<int64_t>(v - t * row_vecs8) * 8;
    const bf16* row = gate_up + static_cast<int64_t>(t) * 2 * inter;
    const Vec8 g = load8_stream(row + j), u = load8_stream(row + inter + j);
    Vec8 o;
#pragma unroll
    for (int e = 0; e < 8; ++e) set(o, e, silu_mul1(get(g, e), get(u, e)));
    store8(out + static_cast<int64_t>(t) * inter + j, o);
  }
}

template <typename Index>
__global__ void add_bias_kernel(bf16* __restrict__ x, int64_t ld, Index vecs, Index row_vecs8,
                                const bf16* __restrict__ bias) {
  pdl_enter();
  for (Index v = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; v < vecs;
       v += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index t = v / row_vecs8;
    const int64_t j = static_cast<int64_t>(v - t * row_vecs8) * 8;
    bf16* p = x + static_cast<int64_t>(t) * ld + j;
    Vec8 xv = load8(p);
    const Vec8 bv = load8(bias + j);
#pragma unroll
    for (int e = 0; e < 8; ++e) set(xv, e, b(get(xv, e) + get(bv, e)));
    store8(p, xv);
  }
}

__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids,
                             int64_t hidden, int64_t first_id, int64_t num_ids,
                             bf16* __restrict__ out) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  const bool in = local >= 0 && local < num_ids;
  const bf16* src = table + (in ? local : 0) * hidden;
  bf16* dst = out + t * hidden;
  for (int64_t i = 8 * threadIdx.x; i < hidden; i += 8 * blockDim.x) {
    store8(dst + i, in ? load8(src + i) : zero8());
  }
}

// Grid of 256-thread blocks for `vecs` items, a grid-stride loop past 2^31 - 1 blocks.
unsigned flat_blocks(int64_t vecs) {
  return static_cast<unsigned>(std::min<int64_t>((vecs + 255) / 256, 0x7fffffff));
}

// ---- the legacy kernels (before issue 20): the reference the tests hold the above to ----

__global__ void legacy_embed_kernel(const bf16* __restrict__ table,
                                    const int32_t* __restrict__ ids, int64_t hidden,
                                    int64_t first_id, int64_t num_ids, bf16* __restrict__ out) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  if (local < 0 || local >= num_ids) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[t * hidden + i] = bf16(0.0f);
    return;
  }
  const bf16* src = table + local * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[t * hidden + i] = src[i];
}

// legacy_embed_kernel + legacy_add_rmsnorm_kernel (add = null, rows = null) in one: the same
// loops and the same block size, so x and out are bit-identical to the two launches'.
__global__ void legacy_embed_rmsnorm_kernel(const bf16* __restrict__ table,
                                            const int32_t* __restrict__ ids, int64_t hidden,
                                            int64_t first_id, int64_t num_ids,
                                            const bf16* __restrict__ w, float eps,
                                            bf16* __restrict__ x, bf16* __restrict__ out) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[t]) - first_id;
  const bf16* src = local < 0 || local >= num_ids ? nullptr : table + local * hidden;
  bf16* xr = x + t * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const bf16 e = src != nullptr ? src[i] : bf16(0.0f);
    xr[i] = e;
    float v = f(e);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + t * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(src != nullptr ? src[i] : bf16(0.0f));
    o[i] = b(f(w[i]) * r(v * inv));
  }
}

__global__ void legacy_add_rmsnorm_kernel(bf16* __restrict__ x, const bf16* __restrict__ add,
                                          const bf16* __restrict__ w, float eps,
                                          bf16* __restrict__ out,
                                          const int32_t* __restrict__ rows, int64_t hidden) {
  pdl_enter();
  const int64_t r_out = blockIdx.x;
  const int64_t row = rows != nullptr ? rows[r_out] : r_out;
  bf16* xr = x + row * hidden;
  const bf16* ar = add != nullptr ? add + row * hidden : nullptr;
  const bool write_back = rows == nullptr && ar != nullptr;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(xr[i]);
    if (ar != nullptr) {
      v = r(v + f(ar[i]));
      if (write_back) xr[i] = b(v);
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  bf16* o = out + r_out * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = f(xr[i]);
    if (ar != nullptr && !write_back) v = r(v + f(ar[i]));
    o[i] = b(f(w[i]) * r(v * inv));
  }
}

__global__ void legacy_silu_mul_kernel(const bf16* __restrict__ gate_up, int64_t tokens,
                                       int64_t inter, bf16* __restrict__ out) {
  pdl_enter();
  const int64_t n = tokens * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / inter, j = i % inter;
    const float g = f(gate_up[t * 2 * inter + j]);
    const float u = f(gate_up[t * 2 * inter + inter + j]);
    out[i] = b(r(g / (1.0f + expf(-g))) * u);
  }
}

__global__ void legacy_add_bias_kernel(bf16* __restrict__ x, int64_t ld, int64_t rows,
                                       int64_t n, const bf16* __restrict__ bias) {
  pdl_enter();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / n, j = i % n;
    bf16& v = x[t * ld + j];
    v = b(f(v) + f(bias[j]));
  }
}

__global__ void scatter_block_table_kernel(const int32_t* __restrict__ compact,
                                           const int32_t* __restrict__ meta,
                                           int32_t* __restrict__ table, int64_t width) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  const int64_t n = meta[0];
  const int64_t w = min(static_cast<int64_t>(meta[1]), width);
  if (r >= n) return;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) table[r * width + c] = compact[r * meta[1] + c];
}

unsigned legacy_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
}

}  // namespace

void scatter_block_table(const int32_t* compact, const int32_t* meta, int32_t* table,
                         int64_t width, int64_t rows, Launch on) {
  if (rows == 0) return;
  launch_kernel(scatter_block_table_kernel, static_cast<unsigned>(rows), 128, 0, on, compact,
                meta, table, width);
}

void embed(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
           int64_t first_id, int64_t num_ids, void* out, Launch on) {
  if (tokens == 0) return;
  const auto* tb = static_cast<const bf16*>(table);
  auto* o = static_cast<bf16*>(out);
  if (!legacy_kernels() && hidden % 8 == 0 && aligned16(table) && aligned16(out)) {
    const int threads = static_cast<int>(std::clamp<int64_t>((hidden / 8 + 31) / 32 * 32, 32, 256));
    launch_kernel(embed_kernel, static_cast<unsigned>(tokens), threads, 0, on, tb, ids, hidden,
                  first_id, num_ids, o);
    return;
  }
  launch_kernel(legacy_embed_kernel, static_cast<unsigned>(tokens), 128, 0, on, tb, ids, hidden,
                first_id, num_ids, o);
}

void embed_rmsnorm(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
                   int64_t first_id, int64_t num_ids, const void* w, float eps, void* x,
                   void* out, Launch on) {
  if (tokens == 0) return;
  const auto* tb = static_cast<const bf16*>(table);
  const auto* wb = static_cast<const bf16*>(w);
  auto* xb = static_cast<bf16*>(x);
  auto* ob = static_cast<bf16*>(out);
  const int k = row_vecs(hidden);
  if (!legacy_kernels() && k > 0 && aligned16(table) && aligned16(w) && aligned16(x) &&
      aligned16(out)) {
    dispatch_vecs(k, [&](auto kc) {
      launch_kernel(embed_rmsnorm_kernel<decltype(kc)::value>, row_blocks(tokens),
                    32 * kRowWarps, 0, on, tb, ids, tokens, first_id, num_ids, wb, eps, xb, ob,
                    static_cast<int>(hidden));
    });
    return;
  }
  launch_kernel(legacy_embed_rmsnorm_kernel, static_cast<unsigned>(tokens), kLegacyThreads, 0,
                on, tb, ids, hidden, first_id, num_ids, wb, eps, xb, ob);
}

void add_rmsnorm(void* x, const void* add, const void* w, float eps, void* out,
                 const int32_t* rows, int64_t num_rows, int64_t hidden, Launch on) {
  if (num_rows == 0) return;
  auto* xb = static_cast<bf16*>(x);
  const auto* ab = static_cast<const bf16*>(add);
  const auto* wb = static_cast<const bf16*>(w);
  auto* ob = static_cast<bf16*>(out);
  const int k = row_vecs(hidden);
  if (!legacy_kernels() && k > 0 && aligned16(x) && aligned16(add) && aligned16(w) &&
      aligned16(out)) {
    dispatch_vecs(k, [&](auto kc) {
      launch_kernel(add_rmsnorm_kernel<decltype(kc)::value>, row_blocks(num_rows),
                    32 * kRowWarps, 0, on, xb, ab, wb, eps, ob, rows, num_rows,
                    static_cast<int>(hidden));
    });
    return;
  }
  launch_kernel(legacy_add_rmsnorm_kernel, static_cast<unsigned>(num_rows), kLegacyThreads, 0,
                on, xb, ab, wb, eps, ob, rows, hidden);
}

void add_bias(void* x, int64_t ld, int64_t rows, int64_t n, const void* bias, Launch on) {
  const int64_t total = rows * n;
  if (total == 0) return;
  auto* xb = static_cast<bf16*>(x);
  const auto* bb = static_cast<const bf16*>(bias);
  if (!legacy_kernels() && n % 8 == 0 && ld % 8 == 0 && aligned16(x) && aligned16(bias)) {
    const int64_t vecs = total / 8;
    if (vecs <= 0x7fffffff) {
      launch_kernel(add_bias_kernel<uint32_t>, flat_blocks(vecs), 256, 0, on, xb, ld,
                    static_cast<uint32_t>(vecs), static_cast<uint32_t>(n / 8), bb);
    } else {
      launch_kernel(add_bias_kernel<int64_t>, flat_blocks(vecs), 256, 0, on, xb, ld, vecs, n / 8,
                    bb);
    }
    return;
  }
  launch_kernel(legacy_add_bias_kernel, legacy_blocks(total), 256, 0, on, xb, ld, rows, n, bb);
}

void silu_mul(const void* gate_up, int64_t tokens, int64_t inter, void* out, Launch on) {
  const int64_t n = tokens * inter;
  if (n == 0) return;
  const auto* g = static_cast<const bf16*>(gate_up);
  auto* o = static_cast<bf16*>(out);
  if (!legacy_kernels() && inter % 8 == 0 && aligned16(gate_up) && aligned16(out)) {
    const int64_t vecs = n / 8;
    if (vecs <= 0x7fffffff) {
      launch_kernel(silu_mul_kernel<uint32_t>, flat_blocks(vecs), 256, 0, on, g,
                    static_cast<uint32_t>(vecs), static_cast<uint32_t>(inter / 8), inter, o);
    } else {
      launch_kernel(silu_mul_kernel<int64_t>, flat_blocks(vecs), 256, 0, on, g, vecs, inter / 8,
                    inter, o);
    }
    return;
  }
  launch_kernel(legacy_silu_mul_kernel, legacy_blocks(n), 256, 0, on, g, tokens, inter, o);
}

}  // namespace kvattn::cuda_model
