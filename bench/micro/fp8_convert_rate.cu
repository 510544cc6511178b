// Throughput of the two ways to turn e4m3 codes into 16-bit mma operands on the GPU:
// kvattn's integer form (fp8_convert.cuh: shifts, LOP3s, one HMUL2 a pair) and the hardware
// conversion (cvt.rn.f16x2.e4m3x2, one F2FP a pair on sm_89+). Each thread converts many
// independent words (8 chains, so the rate, not the latency, is timed) and folds the results
// into one XOR so nothing is dead code. Prints codes converted per SM per clock.
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/micro/fp8_convert_rate.cu -o /tmp/fp8_rate && /tmp/fp8_rate
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/fp8_convert.cuh"

using kvattn::cuda::e4m3x4_to;

constexpr int kIters = 4096;
constexpr int kChains = 8;

__device__ __forceinline__ void hw_e4m3x4(uint32_t q, uint32_t& lo, uint32_t& hi) {
  const uint16_t a = static_cast<uint16_t>(q);
  const uint16_t b = static_cast<uint16_t>(q >> 16);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(a));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(b));
}

template <int kMode>  // 0: integer bf16, 1: integer f16, 2: hardware f16
__global__ void convert_rate(uint32_t seed, uint32_t* out) {
  uint32_t w[kChains];
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) w[c] = seed * (threadIdx.x + 7 * c + 1);
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      uint32_t lo, hi;
      if constexpr (kMode == 0) {
        e4m3x4_to<__nv_bfloat16>(w[c], lo, hi);
      } else if constexpr (kMode == 1) {
        e4m3x4_to<__half>(w[c], lo, hi);
      } else {
        hw_e4m3x4(w[c], lo, hi);
      }
      acc ^= lo ^ hi;
      w[c] += 0x01010101u;  // a new word each round (one IADD, the same in every mode)
    }
  }
  if (acc == seed) out[0] = acc;  // practically never; keeps the work alive
}

template <int kMode>
double rate(int sms, int clock_khz) {
  uint32_t* out;
  cudaMalloc(&out, 4);
  const int blocks = sms * 8, threads = 256;
  convert_rate<kMode><<<blocks, threads>>>(3u, out);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  convert_rate<kMode><<<blocks, threads>>>(5u, out);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaFree(out);
  const double codes = 4.0 * kChains * kIters * blocks * threads;
  return codes / (ms * 1e-3) / sms / (clock_khz * 1e3);
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  std::printf("%s, %d SMs, %d MHz: e4m3 codes converted per SM per clock\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1000);
  std::printf("integer -> bf16 (kvattn)    %.1f\n", rate<0>(prop.multiProcessorCount, clock_khz));
  std::printf("integer -> f16  (kvattn)    %.1f\n", rate<1>(prop.multiProcessorCount, clock_khz));
  std::printf("cvt.rn.f16x2.e4m3x2 (F2FP)  %.1f\n", rate<2>(prop.multiProcessorCount, clock_khz));
  return 0;
}
