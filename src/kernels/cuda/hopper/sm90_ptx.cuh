// sm_90 building blocks of the Hopper kernels: mbarriers, TMA tile loads, wgmma fences and
// shared-memory matrix descriptors, register reallocation. Device code only; every wrapper is
// one PTX instruction (or a try_wait loop) so the kernels read as the PTX ISA describes them.
//
// Shared-memory tiles are written by TMA with the 128-byte swizzle: a tile of R rows x 64
// 16-bit elements is R rows of 128 bytes, 16-byte piece c of row r stored at piece c ^ (r % 8).
// Wider rows are kept as consecutive such tiles ("column blocks" of 64 elements). Every tile
// starts on a 1024-byte boundary (one 8-row swizzle atom), which the descriptors below assume.
#pragma once

#include <cstdint>

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- mbarriers (shared::cta, 64-bit) ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) and the other threads (after
// a __syncthreads).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival that also expects `bytes` of TMA transactions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA: a box of a tensor map -> shared memory, completing on an mbarrier ----
// The tensor map is a __grid_constant__ kernel parameter (its generic address is passed).
// Coordinates are in elements, innermost first; out-of-range boxes are zero-filled and still
// count their full size towards the barrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) of global memory -> shared memory
// by the async proxy, completing on an mbarrier (counted in its transaction bytes).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Orders this thread's ordinary global-memory accesses and its async-proxy ones (bulk loads)
// of the same bytes, both ways.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The SM this thread runs on (%smid: below %nsmid, not necessarily contiguous).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

__device__ __forceinline__ void prefetch_tensor_map(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// ---- wgmma ordering ----
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// A basic-block boundary: a branch, on a value the caller knows is never negative, over two
// never-run nanosleeps. ptxas does not move instructions across it, so what computes `keep`
// (passed through it) stays before a later wgmma_wait, which ptxas otherwise hoists over
// plain arithmetic.
__device__ __forceinline__ void schedule_boundary(int never_negative, float (&keep)[2]) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ge.s32 p, %2, 0;\n"
      "@p bra SKIP;\n"
      "nanosleep.u32 1;\n"
      "nanosleep.u32 1;\n"
      "SKIP:\n"
      "}\n"
      : "+f"(keep[0]), "+f"(keep[1])
      : "r"(never_negative)
      : "memory");
}

// After wgmma_wait: ties the accumulators to this point, so the compiler neither reads them
// earlier nor keeps a stale copy across the asynchronous write.
template <int kRows>
__device__ __forceinline__ void fence_operands(float (&d)[kRows][4]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

// Orders this thread's ordinary shared-memory writes before later async-proxy reads (wgmma,
// TMA) of the same bytes; pair it with a barrier among the writers and the readers.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at named barrier `id` without waiting (the producer side of a turn hand-over).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- shared-memory matrix descriptors (128-byte swizzle) ----
// K-major operand (rows of 64 elements along K, 8-row atoms 1024 bytes apart): `addr` is the
// first row's piece holding the 16 K-elements of this instruction (a column block's base plus
// 32 bytes per K step of 16). Leading offset unused for swizzled K-major layouts.
// MN-major operand (transposed: N contiguous): `addr` is the base of the 16 K-rows; `lbo` is the
// distance between column blocks of 64 N-elements, the 8-row K groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr, uint32_t lbo) {
  constexpr uint64_t kSbo = 1024;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) | ((kSbo >> 4) << 32) |
         (uint64_t{1} << 62);
}

// The same descriptor over a base address, for operands at constant byte offsets from it (the
// K steps and column blocks of a tile): the start address field (bits 0-13, address >> 4) is
// the low word's low bits, so base + off is the base descriptor with off >> 4 added to the low
// word (no carry out of the field: shared memory ends below 256 KB). One integer add per
// instruction instead of rebuilding the 64-bit value (session 14: the rebuilds were ~75 uniform
// instructions per key tile in the prefill consumers, ~12% of all they issued).
struct SmemDescSw128 {
  uint32_t lo;
  uint32_t hi;
  __device__ __forceinline__ SmemDescSw128(uint32_t base, uint32_t lbo) {
    const uint64_t d = smem_desc_sw128(base, lbo);
    lo = static_cast<uint32_t>(d);
    hi = static_cast<uint32_t>(d >> 32);
  }
  // `offset`: a multiple of 16 bytes (a compile-time constant in every caller).
  __device__ __forceinline__ uint64_t at(uint32_t offset) const {
    return (static_cast<uint64_t>(hi) << 32) | (lo + (offset >> 4));
  }
};

// ---- register reallocation between warpgroups ----
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda::sm90
