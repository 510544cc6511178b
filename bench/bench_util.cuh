// Shared by the CUDA benchmarks (bench/*.cu, one translation unit each): the CUDA error check
// that aborts the run, and the bf16 fill with a fixed hash pattern in [-1, 1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

// Evaluates a CUDA runtime call; on an error prints where and what, and exits 1.
#define BENCH_CUDA(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,           \
                   cudaGetErrorString(e_));                                               \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

// p[i] = a hash of (i, seed) mapped to [-1, 1) in steps of 2^-23, rounded to bf16.
__global__ void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f);
  }
}

}  // namespace
