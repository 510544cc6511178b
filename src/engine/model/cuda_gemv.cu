#ifdef KVATTN_WITH_CUDA

#include "engine/model/cuda_gemv.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.h"

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

namespace kvattn::cuda_model {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;

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

template <int M>
struct Shape {
  static constexpr int kV = kRowsPerWarp * M;      // sums per thread
  static constexpr int kVP = pow2_ceil(kV);         // padded to a power of two (<= 32)
  static constexpr int kLog = log2_exact(kVP);
  static constexpr int kUnroll = M <= 2 ? 4 : 2;   // chunks per row in flight
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

// Under PDL (prefetch != 0): the CTA's first tile of weight rows is requested into L2 before
// the grid-dependency wait, while the previous kernel finishes. The weights are written by no
// kernel of a step, so touching them before the wait is safe (cuda_launch.h's contract
// concerns data a previous kernel produces); x, which the previous kernel writes, is read
// only after pdl_enter.
__device__ __forceinline__ void prefetch_first_tile(const __nv_bfloat16* w, int n, int k,
                                                    int ks, int tiles) {
  const int tile = blockIdx.x;
  if (tile >= tiles) return;
  const int rows_per_tile = (kWarps / ks) * kRowsPerWarp;
  const int r0 = tile * rows_per_tile;
  const int rows = min(rows_per_tile, n - r0);
  const int lines = (k * 2 + 127) / 128;  // a row's 128-byte lines (k % 8 == 0)
  for (int i = threadIdx.x; i < rows * lines; i += kThreads) {
    const int r = i / lines;
    prefetch_l2(w + int64_t{r0 + r} * k + int64_t{i - r * lines} * 64);
  }
}

// bf16 pair in a 32-bit word -> two floats (exact).
__device__ __forceinline__ float lo_f(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_f(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

__device__ __forceinline__ void to_f8(const uint4& v, float (&f)[8]) {
  f[0] = lo_f(v.x);
  f[1] = hi_f(v.x);
  f[2] = lo_f(v.y);
  f[3] = hi_f(v.y);
  f[4] = lo_f(v.z);
  f[5] = hi_f(v.z);
  f[6] = lo_f(v.w);
  f[7] = hi_f(v.w);
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

template <int M>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                const __nv_bfloat16* __restrict__ w, int n, int k, __nv_bfloat16* __restrict__ y,
                int64_t ldy, int ks, int tiles, int prefetch) {
  using S = Shape<M>;
  constexpr int U = S::kUnroll;
  if (prefetch != 0) prefetch_first_tile(w, n, k, ks, tiles);
  pdl_enter();
  extern __shared__ uint4 smem[];
  const int C = k >> 3;  // 16-byte chunks per row
  uint4* xs = smem;
  float* red = reinterpret_cast<float*>(smem + M * C);

  for (int i = threadIdx.x; i < M * C; i += kThreads) {
    const int m = i / C;
    const int c = i - m * C;
    xs[i] = *reinterpret_cast<const uint4*>(x + m * ldx + int64_t{c} * 8);
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int s = warp % ks;  // k slice
  const int g = warp / ks;  // row group
  const int rows_per_tile = (kWarps / ks) * kRowsPerWarp;
  const int stride = 32 * ks;
  const int c0 = s * 32 + lane;
  const int owner_shift = 5 - S::kLog;
  const int idx = lane >> owner_shift;  // the sum this lane ends with
  const bool owner = (lane & ((1 << owner_shift) - 1)) == 0 && idx < S::kV;

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int r0 = tile * rows_per_tile + g * kRowsPerWarp;
    const uint4* wr[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      wr[r] = reinterpret_cast<const uint4*>(w + int64_t{min(r0 + r, n - 1)} * k);

    float acc[kRowsPerWarp][M];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

    for (int c = c0; c < C; c += U * stride) {
      uint4 wv[U][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int cc = c + u * stride;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          wv[u][r] = cc < C ? ld_stream(wr[r] + cc) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int cc = c + u * stride;
        if (cc < C) {
          float wf[kRowsPerWarp][8];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) to_f8(wv[u][r], wf[r]);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float xf[8];
            to_f8(xs[m * C + cc], xf);
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r)
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
      const int row = r0 + idx / M;
      if (owner && row < n) y[(idx % M) * ldy + row] = __float2bfloat16_rn(sum);
    } else {
      if (owner) red[warp * S::kVP + idx] = sum;
      __syncthreads();
      const int groups = kWarps / ks;
      for (int t = threadIdx.x; t < groups * S::kVP; t += kThreads) {
        const int gg = t / S::kVP;
        const int i = t - gg * S::kVP;
        if (i >= S::kV) continue;
        float total = 0.0f;
        for (int ss = 0; ss < ks; ++ss) total += red[(gg * ks + ss) * S::kVP + i];
        const int row = tile * rows_per_tile + gg * kRowsPerWarp + i / M;
        if (row < n) y[(i % M) * ldy + row] = __float2bfloat16_rn(total);
      }
      __syncthreads();  // red is reused by the next tile
    }
  }
}

using Kernel = void (*)(const __nv_bfloat16*, int64_t, const __nv_bfloat16*, int, int,
                        __nv_bfloat16*, int64_t, int, int, int);

constexpr Kernel kKernels[Gemv::kMaxRows] = {gemv_kernel<1>, gemv_kernel<2>, gemv_kernel<3>,
                                             gemv_kernel<4>, gemv_kernel<5>, gemv_kernel<6>,
                                             gemv_kernel<7>, gemv_kernel<8>};

}  // namespace

Gemv::Gemv(int device) {
  cuda::DeviceGuard guard(device);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sms_ = prop.multiProcessorCount;
  smem_optin_ = prop.sharedMemPerBlockOptin;
  smem_per_sm_ = prop.sharedMemPerMultiprocessor;
  for (int m = 0; m < kMaxRows; ++m) {
    CUDA_CHECK(cudaFuncSetAttribute(kKernels[m], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem_optin_)));
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kKernels[m]));
    regs_[m] = std::max(attr.numRegs, 1);
  }
}

Gemv::Mode Gemv::env_mode() {
  static const Mode mode = [] {
    const char* e = std::getenv("KVATTN_GEMV");
    if (e != nullptr && std::strcmp(e, "0") == 0) return Mode::kOff;
    if (e != nullptr && std::strcmp(e, "all") == 0) return Mode::kAll;
    return Mode::kAuto;
  }();
  return mode;
}

bool Gemv::preferred(int64_t rows, int64_t n, int64_t /*k*/) {
  return rows >= 1 && rows <= kMaxRows && (n <= 2048 || (n >= 65536 && rows <= 4));
}

bool Gemv::run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
               void* y, int64_t ldy, Launch on) const {
  if (rows < 1 || rows > kMaxRows || n < 1 || k < 8 || k % 8 != 0 || ldx % 8 != 0) return false;
  if (n > (int64_t{1} << 30) || k > (int64_t{1} << 30)) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return false;
  const size_t smem = static_cast<size_t>(rows * k) * 2 + kRedBytes;
  if (smem > smem_optin_) return false;

  // K split: the fewest warps per row group that still gives two CTAs per SM, as long as each
  // warp gets at least one 16-byte chunk of each row per lane.
  const int64_t chunks = k / 8;
  int ks = 1;
  auto tiles_for = [&](int s) {
    const int64_t per = (kWarps / s) * kRowsPerWarp;
    return (n + per - 1) / per;
  };
  while (ks < kWarps && tiles_for(ks) < 2 * sms_ && chunks >= 32 * (ks * 2)) ks *= 2;
  const int64_t tiles = tiles_for(ks);

  // One wave of resident CTAs at most (registers, shared memory, threads).
  const int regs = (regs_[rows - 1] + 7) / 8 * 8;
  int per_sm = std::min<int>(65536 / (regs * kThreads), 2048 / kThreads);
  per_sm = std::min<int>(per_sm, static_cast<int>(smem_per_sm_ / (smem + 1024)));
  per_sm = std::max(per_sm, 1);
  const int64_t grid = std::min<int64_t>(tiles, int64_t{sms_} * per_sm);

  launch_kernel(kKernels[rows - 1], static_cast<unsigned>(grid), kThreads, smem, on,
                static_cast<const __nv_bfloat16*>(x), ldx, static_cast<const __nv_bfloat16*>(w),
                static_cast<int>(n), static_cast<int>(k), static_cast<__nv_bfloat16*>(y), ldy,
                ks, static_cast<int>(tiles), on.pdl ? 1 : 0);
  return true;
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
