// A barrier over every CTA of a co-resident (cooperative) grid, on one global word that needs
// no reset between launches or graph replays: CTA 0 adds 2^31 - (n - 1) and every other CTA
// adds 1, so the word's top bit flips exactly when the n-th CTA arrives, and the low bits are
// back where they started (cooperative groups' grid.sync scheme). Each CTA's thread 0 compares
// the top bit of the value it added to with the word's, so a barrier never mistakes the next
// one's arrivals for its own. Zero the word once when it is allocated.
//
// Memory: the block's writes are ordered before the arrival by __syncthreads + thread 0's
// releasing add, and after the wait by its acquiring load + __syncthreads; data other CTAs
// wrote must still be read past L1 (ld.global.cg), which is not coherent across SMs.
#pragma once

#include <cstdint>

namespace kvattn::cuda_model::token {

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned atom_add_release_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__device__ __forceinline__ void red_add_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Thread 0 arrives with a releasing add and polls with acquiring loads (no sequentially
// consistent fence: __threadfence's MEMBAR.SC cost ~2 us a barrier). The CTA barriers on either
// side extend the release to the block's earlier writes and the acquire to its later reads.
// Thread 0 issues no cp.async in the token kernel (token_gemv.cuh's stage_weights and the K/V
// rounds leave warp 0 out), so its release never waits for a copy in flight.
__device__ __forceinline__ void grid_barrier(unsigned* word) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    const unsigned before = atom_add_release_gpu(word, add);
    while (((before ^ ld_acquire_gpu(word)) & 0x80000000u) == 0) {
    }
  }
  __syncthreads();
}

}  // namespace kvattn::cuda_model::token
