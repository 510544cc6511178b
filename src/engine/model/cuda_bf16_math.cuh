// Device helpers shared by the CUDA model's kernels (cuda_kernels.cu, cuda_rope_kv.cu): bf16
// <-> float with round to nearest even, rounding through bf16 (to mirror a bf16 store), and a
// warp and a block sum. Header-only; each translation unit gets its own internal copies.
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

// Block-wide sum (blockDim.x a multiple of 32, <= 1024).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? partial[lane] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  const float total = partial[0];
  __syncthreads();  // partial is reused by the next call
  return total;
}

}  // namespace
}  // namespace kvattn::cuda_model
