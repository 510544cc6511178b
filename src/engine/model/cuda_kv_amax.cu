#ifdef KVATTN_WITH_CUDA

#include "engine/model/cuda_kv_amax.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kvattn/core/error.h"

namespace kvattn::cuda_model {

namespace {

constexpr int kThreads = 256;

// CTA (h, which, z): head h of K (which 0) or V (1), rows z, z + gridDim.z, ...; each thread a
// strided share of those rows' head_dim elements, then the CTA's max, folded into amax[h] by
// one atomicMax on the float's bits (non-negative floats order as their int bits; +Inf too).
__global__ void __launch_bounds__(kThreads)
    kv_amax_kernel(const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                   int64_t ld, int64_t tokens, int head_dim, float* k_amax, float* v_amax) {
  pdl_enter();
  const int h = blockIdx.x;
  const __nv_bfloat16* base = (blockIdx.y == 0 ? k : v) + static_cast<int64_t>(h) * head_dim;
  float m = 0.0f;
  for (int64_t t = blockIdx.z; t < tokens; t += gridDim.z) {
    const __nv_bfloat16* row = base + t * ld;
    for (int x = threadIdx.x; x < head_dim; x += kThreads) {
      m = fmaxf(m, fabsf(__bfloat162float(row[x])));  // fmaxf ignores NaN
    }
  }
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    float* dst = (blockIdx.y == 0 ? k_amax : v_amax) + h;
    atomicMax(reinterpret_cast<int*>(dst), __float_as_int(m));
  }
}

}  // namespace

void kv_amax_record(const void* k, const void* v, int64_t ld, int64_t tokens,
                    int64_t num_kv_heads, int64_t head_dim, float* k_amax, float* v_amax,
                    Launch on) {
  KVATTN_CHECK(num_kv_heads >= 1 && num_kv_heads <= 65535 && head_dim >= 1 &&
                   ld >= num_kv_heads * head_dim && tokens >= 0,
               "kv_amax_record: bad shape (tokens ", tokens, ", num_kv_heads ", num_kv_heads,
               ", head_dim ", head_dim, ", ld ", ld, ")");
  KVATTN_CHECK(k != nullptr && v != nullptr && k_amax != nullptr && v_amax != nullptr,
               "kv_amax_record: null pointer");
  if (tokens == 0) return;
  const auto z = static_cast<unsigned>(std::min<int64_t>(tokens, 64));
  launch_kernel(kv_amax_kernel, dim3(static_cast<unsigned>(num_kv_heads), 2, z), kThreads, 0, on,
                static_cast<const __nv_bfloat16*>(k), static_cast<const __nv_bfloat16*>(v), ld,
                tokens, static_cast<int>(head_dim), k_amax, v_amax);
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
