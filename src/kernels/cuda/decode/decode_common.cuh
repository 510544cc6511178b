// The decode kernels' building blocks (decode_attention.cu has the design): shared-memory
// helpers, output rounding, length clamping, and the 16-bit tile layout with its fp8 twin
// (decode_fp8.cuh) behind KvTile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/decode/decode_fp8.cuh"
#include "kernels/cuda/decode/decode_page.h"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {
namespace {

// ---- diagnostics (p.probe, cuda_tuning().decode_probe): the small kernel's phase stamps and
// the split kernel's entry and exit times, kDecodeProbeSlots words per CTA; null: nothing is
// written ----

// The device's nanosecond timer and this CTA's SM.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
// This CTA's kDecodeProbeSlots stamps in p.probe (non-null probe only).
__device__ __forceinline__ unsigned long long* probe_row(const DecodeParams& p) {
  const int64_t cta =
      (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  return p.probe + cta * kDecodeProbeSlots;
}

// ---- tags between a launch's pieces and their merger (the small kernel's LL words) ----

// The tag of a launch whose unit found `gen` in its word of ws_gen (the previous launch's tag;
// the merger stores this launch's there): a hash of gen and the host's epoch, never gen itself,
// so the words the previous launch of the same layout left behind are always stale, and any
// other leftover (another layout's words or gens, a fresh workspace) matches with odds 2^-32.
__device__ __forceinline__ uint32_t ll_tag_after(uint32_t gen, uint32_t epoch) {
  uint32_t x = gen ^ epoch ^ 0x9e3779b9u;  // murmur3's finalizer
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x != gen ? x : x ^ 1u;
}

// Polls before the merger gives up on a piece (each poll is an L2 round trip: seconds in all).
// Unreachable while every CTA of the launch runs; a guard against a hang, not a code path.
constexpr int kMaxPolls = 1 << 22;

// 32-bit words that one CTA publishes and another polls: relaxed at gpu scope (never served
// from a stale L1 line), the acquire form for the poll that precedes reading what was published.
__device__ __forceinline__ uint32_t ld_relaxed_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_acquire_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---- building blocks (kernels/cuda/ptx.cuh has the fragment layouts) ----------------------
using ptx::cp_async_16;  // (dst, src, valid): !valid zero-fills the 16 bytes, reads nothing
using ptx::cp_async_16_hint;
using ptx::l2_policy;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_16816;
using ptx::pack2;
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return ptx::smem_addr(p); }
__device__ __forceinline__ float fast_exp2(float x) { return ptx::exp2_approx(x); }  // exp2(-inf) = +0

__device__ __forceinline__ void st_shared_16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Eight 16-bit elements from an address that is only 2-byte aligned.
template <typename T>
__device__ __forceinline__ uint4 load_8_unaligned(const T* src) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = static_cast<uint32_t>(__ldg(s + 2 * j)) | (static_cast<uint32_t>(__ldg(s + 2 * j + 1)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

constexpr float kNegInf = -INFINITY;

// A cache_seqlens value clamped to the table's capacity; a bad value is recorded by `report`.
__device__ __forceinline__ int clamp_len(const DecodeParams& p, int len, bool report) {
  if (len < 0 || len > p.capacity) {
    if (report) record_fault(p.fault_word, kFaultSeqlenOutOfRange);
    return len < 0 ? 0 : p.capacity;
  }
  return len;
}

// The page of key `key` in p's cache and its offset there (decode_page.h).
__device__ __forceinline__ int key_page(const DecodeParams& p, int key, int& offset) {
  return page_of(p.block_size, p.block_shift, key, offset);
}

// Keys of sequence b, clamped (clamp_len).
__device__ __forceinline__ int seq_len(const DecodeParams& p, int b, bool report) {
  return clamp_len(p, __ldg(p.cache_seqlens + b), report);
}


// One warp's stage: the K tile, then the V tile, of kDecodeTileKeys keys; rows of D*2 bytes
// whose 16-byte chunks are XOR-swizzled by key, so ldmatrix is free of bank conflicts.
template <int D>
struct Tile {
  static constexpr int kChunks = D / 8;                          // 16-byte chunks per row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kTileBytes = kDecodeTileKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kElemsPerChunk = 8;
  static constexpr int kKeyStep = 32 / kChunks;                  // keys between a lane's copies
  static constexpr int kCopies = kDecodeTileKeys / kKeyStep;     // copies per lane per K tile
  static_assert(32 % kChunks == 0 && kDecodeTileKeys % kKeyStep == 0);
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    return base + key * kRowBytes + ((chunk ^ (key & 7)) << 4);
  }
};

// The cache element type KV: the query's 16-bit type (Tile) or uint8_t, float8_e4m3 codes
// (Fp8Tile, decode_fp8.cuh).
template <typename KV>
inline constexpr bool kIsFp8 = sizeof(KV) == 1;
template <typename KV, int D>
using KvTile = std::conditional_t<kIsFp8<KV>, Fp8Tile<D>, Tile<D>>;

// Sixteen bytes from an address with no alignment guarantee (fp8 caches' slow path).
__device__ __forceinline__ uint4 load_16_bytes_unaligned(const uint8_t* src) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = static_cast<uint32_t>(__ldg(src + 4 * j)) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 1)) << 8) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 2)) << 16) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 3)) << 24);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The tensors' head_dim for kernels of tile dim D over a cache of element size kKvBytes: D
// itself, known at compile time, except where D = 128 hosts the padded head dims 80 and 96
// (decode_tile_dim; 16-bit and fp8 caches: whole 16-byte chunks either way): p.head_dim there.
template <int D, int kKvBytes = 2>
__device__ __forceinline__ int mem_head_dim(const DecodeParams& p) {
  static_assert(kKvBytes == 1 || kKvBytes == 2);
  if constexpr (D == 128) {
    return p.head_dim;
  } else {
    return D;
  }
}

__device__ __forceinline__ int tiles_of(int len) {
  return (len + kDecodeTileKeys - 1) / kDecodeTileKeys;
}

// Waits until at most n of this thread's cp.async groups are pending (n run-time, < 8).
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

}  // namespace
}  // namespace kvattn::cuda
