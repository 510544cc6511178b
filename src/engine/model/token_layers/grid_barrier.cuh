// A barrier over every CTA of a co-resident (cooperative) grid, on one global word that needs
// no reset between launches or graph replays: CTA 0 adds 2^31 - (n - 1) and every other CTA
// adds 1, so the word's top bit flips exactly when the n-th CTA arrives, and the low bits are
// back where they started (cooperative groups' grid.sync scheme). Each CTA's thread 0 compares
// the top bit of the value it added to with the word's, so a barrier never mistakes the next
// one's arrivals for its own. Zero the word once when it is allocated.
//
// Memory: the block's writes are ordered before the arrival by __syncthreads + the releasing
// fence of thread 0, and after the wait by the acquiring load + fence; data other CTAs wrote
// must still be read past L1 (ld.global.cg), which is not coherent across SMs.
#pragma once

#include <cstdint>

namespace kvattn::cuda_model::token {

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void grid_barrier(unsigned* word) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    const unsigned before = atomicAdd(word, add);
    while (((before ^ ld_acquire_gpu(word)) & 0x80000000u) == 0) {
    }
    __threadfence();
  }
  __syncthreads();
}

}  // namespace kvattn::cuda_model::token
