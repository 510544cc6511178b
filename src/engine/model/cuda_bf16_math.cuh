// Device helpers shared by the CUDA model's kernels (cuda_kernels.cu, cuda_rope_kv.cu): bf16
// <-> float with round to nearest even, rounding through bf16 (to mirror a bf16 store), and a
// warp sum. Header-only; each translation unit gets its own internal copies.
#pragma once

#include <cuda_bf16.h>

namespace kvattn::cuda_model {
namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 b(float v) { return __float2bfloat16(v); }  // round to nearest even
__device__ __forceinline__ float r(float v) { return f(b(v)); }              // round through bf16

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace
}  // namespace kvattn::cuda_model
