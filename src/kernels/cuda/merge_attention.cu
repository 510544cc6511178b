// merge_attention_states on the GPU: out = out_a * w_a + out_b * w_b per (token, head) row,
// with the float32 weights of merge_weights (merge_attention_backend.h, shared with the CPU).
//
// Memory-bound and elementwise: it reads two rows and writes one, so the only goals are full
// 16-byte accesses and one memory latency per row. A group of G threads (a power of two, up to
// a warp) owns one row: G = the row's 16-byte vectors rounded up to a power of two (8 for
// head_dim 64 in 16 bits, 16 for 128, 32 for 256), so each thread usually moves one vector of
// out_a, one of out_b and one of out. The row's two lse values are loaded by the group's first
// thread together with every thread's first vectors (the weights select, they do not gate the
// loads), then broadcast with a shuffle: one round trip per row. Rows are head-major inside a
// CTA (blockIdx.y = head, consecutive rows = consecutive tokens), so the lse accesses of a warp
// are contiguous; every row's out segment is whole sectors either way.
// A scalar form (one element per access) serves head dims whose rows are not a whole number of
// vectors and pointers or token strides that are not 16-byte aligned.
//
// Aliasing (out == out_a, lse == lse_a): every element is loaded by the thread that stores it,
// before it stores it, and only the group's first thread touches lse memory; no __ldg and no
// __restrict__, since the inputs may be written during the kernel.
// No allocation, no synchronisation, no fault word use (there is no index to check): graph-safe.
// Not yet measured on a GPU; expected near the copy ceiling for tokens * heads >= ~10^5 rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/merge_attention_backend.h"

namespace kvattn::cuda {
namespace {

// Layout (elements; one params block per launch, passed by value):
//   out_a / out_b / out   row (t, h) at  base + t * stride_* + h * head_dim, head_dim contiguous
//   lse_a / lse_b / lse   (h, t) at  h * lstride_* + t; lse may be null
struct MergeParams {
  const void* out_a;
  const void* out_b;
  void* out;
  const float* lse_a;
  const float* lse_b;
  float* lse;
  int64_t stride_a, stride_b, stride_o;
  int64_t lstride_a, lstride_b, lstride_o;  // head strides of the lse arrays
  int64_t tokens;
  int head_dim;
  int vecs;        // accesses per row: head_dim / N
  int group_log2;  // G = 1 << group_log2 threads per row
};

// Storage bits of an element type and its float conversions.
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  using Bits = float;
  static __device__ __forceinline__ float load(float b) { return b; }
  static __device__ __forceinline__ float store(float x) { return x; }
};
template <>
struct Elem<__nv_bfloat16> {
  using Bits = uint16_t;
  static __device__ __forceinline__ float load(uint16_t b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  static __device__ __forceinline__ uint16_t store(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};
template <>
struct Elem<__half> {
  using Bits = uint16_t;
  static __device__ __forceinline__ float load(uint16_t b) {
    return __half2float(__ushort_as_half(b));
  }
  static __device__ __forceinline__ uint16_t store(float x) {
    return __half_as_ushort(__float2half_rn(x));
  }
};

// N consecutive elements, moved as one access (16 bytes in the vector form).
template <typename Bits, int N>
struct Pack {
  Bits v[N];
};

template <typename Bits, int N>
__device__ __forceinline__ Pack<Bits, N> load_pack(const Bits* p) {
  Pack<Bits, N> r;
  if constexpr (sizeof(r) == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    memcpy(&r, &u, 16);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = p[i];
  }
  return r;
}

template <typename Bits, int N>
__device__ __forceinline__ void store_pack(Bits* p, const Pack<Bits, N>& r) {
  if constexpr (sizeof(r) == 16) {
    uint4 u;
    memcpy(&u, &r, 16);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = r.v[i];
  }
}

// blockIdx.y = head; each group of G threads merges one token's row of that head.
template <typename T, int N>
__global__ void merge_states_kernel(const __grid_constant__ MergeParams p) {
  using E = Elem<T>;
  using Bits = typename E::Bits;
  const int head = blockIdx.y;
  const int group = 1 << p.group_log2;
  const int g = threadIdx.x & (group - 1);
  const int64_t token =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x >> p.group_log2) + (threadIdx.x >> p.group_log2);
  const bool valid = token < p.tokens;
  const int64_t hh = static_cast<int64_t>(head);
  const int64_t col = static_cast<int64_t>(head) * p.head_dim;
  const Bits* ra = static_cast<const Bits*>(p.out_a) + token * p.stride_a + col;
  const Bits* rb = static_cast<const Bits*>(p.out_b) + token * p.stride_b + col;
  Bits* ro = static_cast<Bits*>(p.out) + token * p.stride_o + col;

  // Issue the lse loads and this thread's first vectors together.
  float la = 0.0f, lb = 0.0f;
  if (valid && g == 0) {
    la = p.lse_a[hh * p.lstride_a + token];
    lb = p.lse_b[hh * p.lstride_b + token];
  }
  Pack<Bits, N> a{}, b{};
  int v = g;
  if (valid && v < p.vecs) {
    a = load_pack<Bits, N>(ra + v * N);
    b = load_pack<Bits, N>(rb + v * N);
  }
  // Every lane of the warp takes part (no early exit above), so the full mask is right.
  const int leader = (threadIdx.x & 31) & ~(group - 1);
  la = __shfl_sync(0xffffffffu, la, leader);
  lb = __shfl_sync(0xffffffffu, lb, leader);
  if (!valid) return;
  const MergeWeights w = merge_weights(la, lb);

  for (; v < p.vecs; v += group) {
    if (v != g) {
      a = load_pack<Bits, N>(ra + v * N);
      b = load_pack<Bits, N>(rb + v * N);
    }
    Pack<Bits, N> o;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float r = w.use_a ? E::load(a.v[i]) * w.fa : 0.0f;
      if (w.use_b) r = fmaf(E::load(b.v[i]), w.fb, r);
      if (w.nan) r = __int_as_float(0x7fc00000);
      o.v[i] = E::store(r);
    }
    store_pack<Bits, N>(ro + v * N, o);
  }
  if (p.lse != nullptr && g == 0) p.lse[hh * p.lstride_o + token] = w.lse;
}

int ceil_log2(int64_t x) {
  int l = 0;
  while ((int64_t{1} << l) < x) ++l;
  return l;
}

template <typename T, int N>
void launch(MergeParams p, int64_t heads, cudaStream_t stream) {
  p.vecs = p.head_dim / N;
  p.group_log2 = ceil_log2(p.vecs) > 5 ? 5 : ceil_log2(p.vecs);
  // CTAs of up to 256 threads, fewer (down to a warp) for few tokens.
  const int64_t want = (int64_t{1} << ceil_log2(p.tokens < 256 ? p.tokens : 256)) << p.group_log2;
  const int threads = want < 32 ? 32 : (want > 256 ? 256 : static_cast<int>(want));
  const int64_t rows_per_cta = threads >> p.group_log2;
  const int64_t ctas = (p.tokens + rows_per_cta - 1) / rows_per_cta;
  KVATTN_CHECK(ctas <= 0x7fffffff, "merge_attention_states: ", p.tokens,
               " tokens exceed one launch");
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(heads));
  merge_states_kernel<T, N><<<grid, threads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void dispatch_width(const MergeParams& p, int64_t heads, bool vector, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (vector) {
    launch<T, kVec>(p, heads, stream);
  } else {
    launch<T, 1>(p, heads, stream);
  }
}

}  // namespace

void merge_attention_states(const MergeStatesArgs& a) {
  const int64_t tokens = a.out_a.size(0), heads = a.out_a.size(1), d = a.out_a.size(2);
  KVATTN_CHECK(heads <= 65535, "merge_attention_states: num_heads must be <= 65535 on CUDA but is ",
               heads);
  MergeParams p{};
  p.out_a = a.out_a.data;
  p.out_b = a.out_b.data;
  p.out = a.out.data;
  p.lse_a = a.lse_a.ptr<const float>();
  p.lse_b = a.lse_b.ptr<const float>();
  p.lse = a.lse.defined() ? a.lse.ptr<float>() : nullptr;
  p.stride_a = a.out_a.stride(0);
  p.stride_b = a.out_b.stride(0);
  p.stride_o = a.out.stride(0);
  p.lstride_a = a.lse_a.stride(0);
  p.lstride_b = a.lse_b.stride(0);
  p.lstride_o = a.lse.defined() ? a.lse.stride(0) : 0;
  p.tokens = tokens;
  p.head_dim = static_cast<int>(d);

  // The vector form needs every row (and so every head) to start on a 16-byte boundary.
  const int64_t es = dtype_size(a.out_a.dtype);
  uint64_t bits = reinterpret_cast<uintptr_t>(p.out_a) | reinterpret_cast<uintptr_t>(p.out_b) |
                  reinterpret_cast<uintptr_t>(p.out) | static_cast<uint64_t>(d * es);
  if (tokens > 1) {  // a lone token's stride is never used (and may be anything)
    bits |= static_cast<uint64_t>(p.stride_a * es) | static_cast<uint64_t>(p.stride_b * es) |
            static_cast<uint64_t>(p.stride_o * es);
  }
  const bool vector = (bits & 15u) == 0;

  DeviceGuard guard(a.out_a.device.index);
  auto s = static_cast<cudaStream_t>(a.stream.handle);
  switch (a.out_a.dtype) {
    case DType::kF32: dispatch_width<float>(p, heads, vector, s); break;
    case DType::kBF16: dispatch_width<__nv_bfloat16>(p, heads, vector, s); break;
    case DType::kF16: dispatch_width<__half>(p, heads, vector, s); break;
    default: KVATTN_FAIL("merge_attention_states (cuda): unsupported dtype ", a.out_a.dtype);
  }
}

}  // namespace kvattn::cuda
