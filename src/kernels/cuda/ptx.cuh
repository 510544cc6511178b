// sm_80+ building blocks shared by the prefill and decode kernels: cp.async, ldmatrix,
// mma.sync m16n8k16, exp2.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .row.col), lane = 4 * g + t:
//   A 16x16: a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8:  b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8..2t+9, n g)
//   C 16x8:  c0,c1 = (g, 2t..2t+1)  c2,c3 = (g+8, 2t..2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; register i receives
// (row g, cols 2t..2t+1) of matrix i, or with .trans (rows 2t..2t+1, col g).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kvattn::cuda::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; when !valid the source is ignored (never read, so any address
// will do) and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile(
      "{\n"
      ".reg .pred ignore;\n"
      "setp.eq.u32 ignore, %2, 0;\n"
      "cp.async.cg.shared.global [%0], [%1], 16, ignore;\n"
      "}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<uint32_t>(valid))
      : "memory");
}

// An L2 cache policy for the *_hint copies: evict_first marks the lines as the first to go
// (data read once), evict_normal is the default priority.
__device__ __forceinline__ uint64_t l2_policy(bool evict_first) {
  uint64_t first, normal;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
  return evict_first ? first : normal;
}

// cp_async_16 with an L2 cache policy (l2_policy).
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void* src, bool valid,
                                                 uint64_t policy) {
  asm volatile(
      "{\n"
      ".reg .pred ignore;\n"
      "setp.eq.u32 ignore, %2, 0;\n"
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, ignore, %3;\n"
      "}\n" ::"r"(dst),
      "l"(src), "r"(static_cast<uint32_t>(valid)), "l"(policy)
      : "memory");
}

// 4-byte global -> shared copy (L1-cached: neighbouring threads often read the same word).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b on the tensor cores, f32 accumulators. T is __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Transposes an 8x8 matrix of 16-bit values held in the fragment layout above (lane 4g + t
// holds row g, columns 2t..2t+1): afterwards the lane holds row g of the transpose, i.e.
// (rows 2t..2t+1, column g) of the original (sm_75+).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Two floats -> one register of two 16-bit values (lo in the low half), round to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// 2^x, flushing denormals; exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm_90+; no-ops on older targets and when the kernel was not
// launched with cudaLaunchAttributeProgrammaticStreamSerialization).
// grid_dependency_wait: blocks until every prerequisite grid has completed and its memory
// operations are visible (full completion, whatever the prerequisite did about triggering).
// grid_launch_dependents: this CTA's consent that the dependent grid may be scheduled; it is
// scheduled once every CTA of this grid has consented or exited. Correctness never rests on
// it: the dependent still waits for this grid's completion before reading its results.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace kvattn::cuda::ptx
