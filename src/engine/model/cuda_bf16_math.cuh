// Device helpers shared by the CUDA model's kernels (cuda_kernels.cu, cuda_rope_kv.cu,
// cuda_gemv.cu, token_layers/): bf16 <-> float with round to nearest even, rounding through
// bf16 (to mirror a bf16 store), 16-byte groups of eight bf16, and a warp and a block sum. Header-only; each translation unit gets its own internal copies.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kvattn::cuda_model {
namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 b(float v) { return __float2bfloat16(v); }  // round to nearest even
__device__ __forceinline__ float r(float v) { return f(b(v)); }              // round through bf16

// A bf16 pair in a 32-bit word -> two floats (exact), and eight of them in 16 bytes.
__device__ __forceinline__ float lo_f(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_f(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ void to_f8(const uint4& v, float (&out)[8]) {
  out[0] = lo_f(v.x);
  out[1] = hi_f(v.x);
  out[2] = lo_f(v.y);
  out[3] = hi_f(v.y);
  out[4] = lo_f(v.z);
  out[5] = hi_f(v.z);
  out[6] = lo_f(v.w);
  out[7] = hi_f(v.w);
}

// Two / eight floats -> bf16 (round to nearest even) packed as to_f8 unpacks them.
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint4 pack8(const float (&in)[8]) {
  return make_uint4(pack2(in[0], in[1]), pack2(in[2], in[3]), pack2(in[4], in[5]),
                    pack2(in[6], in[7]));
}

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
