// The float8_e4m3 form of the decode kernels' tile: shared-memory layout, the conversion to
// the 16-bit mma operand type, and the two GEMM steps of one 16-key tile.
//
// An fp8 cache stores e4m3 codes; a key reads as e4m3(code) * k_scale[kvh] (store_kv.h). The
// kernels keep the codes in shared memory (half the bytes of a 16-bit tile, so twice the keys
// in flight for the same memory), convert them to the query's 16-bit type while building the
// mma B fragments (every e4m3 value is exact in f16 and bf16), and fold the scales into
// scalars: k_scale into the softmax scale of the unit, v_scale into the piece's output.
//
// ldmatrix moves 16-bit elements, so the fragments are read with 32-bit shared loads instead,
// in orders chosen so that each load brings whole fragment registers:
// - S = Q K^T: the reduction runs over head dims in any order, as long as Q and K agree. In
//   k-step ks the mma k indices {2t, 2t+1, 2t+8, 2t+9} of lane quad-index t stand for dims
//   16 ks + 4t + {0, 1, 2, 3}: one 32-bit word of key row n = g (lane / 4) gives both B
//   registers; Q's A registers are read with the same map (decode_fp8_q_dim).
// - O = P V: the mma n index (a head dim of O) is free to relabel as long as O is relabelled
//   back. In 32-dim group c, n-tile j = 4c + jj, n index g stands for dim 32c + 4g + jj: one
//   word of each of the keys 2t, 2t+1, 2t+8, 2t+9 (dims 32c + 4g ..) holds the B registers
//   of all four n-tiles of the group (byte permutes pair the keys). After the last tile the
//   accumulators are moved back to the mma layout inside each lane quad (fp8_restore_o).
// Layout: the 16 rows of a K (or V) tile are packed into 128-byte lines (one row per line at
// head_dim 128, two at 64) of eight 16-byte chunks, XOR-swizzled per line so that both read
// patterns above are free of bank conflicts (fp8_line_swizzle).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/decode_params.h"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

// Swizzle of the 16-byte chunks of 128-byte line `line`. Head_dim 128: the line is one key,
// swizzle key & 7. Head_dim 64: a line holds keys 2i (chunks 0-3) and 2i + 1 (chunks 4-7);
// the values {0, 3, 5, 6} differ in their low two bits (the S reads: eight keys, one chunk
// index) and in their high two bits (the P V reads: four even keys, two adjacent chunks).
template <int D>
__device__ __forceinline__ uint32_t fp8_line_swizzle(int line) {
  if constexpr (D == 128) {
    return static_cast<uint32_t>(line & 7);
  } else {
    return (0x6530u >> (4 * (line & 3))) & 0xfu;
  }
}

template <int D>
struct Fp8Tile {
  static_assert(D == 64 || D == 128, "fp8 decode tiles: head_dim 64 or 128");
  static constexpr int kChunks = D / 16;                          // 16-byte chunks per row
  static constexpr int kRowBytes = D;
  static constexpr int kKeysPerLine = 128 / kRowBytes;
  static constexpr int kTileBytes = kDecodeTileKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kElemsPerChunk = 16;
  static constexpr int kKeyStep = 32 / kChunks;                  // keys between a lane's copies
  static constexpr int kCopies = kDecodeTileKeys / kKeyStep;     // copies per lane per K tile
  static_assert(32 % kChunks == 0 && kDecodeTileKeys % kKeyStep == 0);
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    const int line = key / kKeysPerLine;
    const uint32_t pos = static_cast<uint32_t>((key % kKeysPerLine) * kChunks + chunk);
    return base + line * 128 + ((pos ^ fp8_line_swizzle<D>(line)) << 4);
  }
};

// The head dim that the query element (k-step ks, half, lane quad-index t4) of an A fragment
// stands for in the fp8 S = Q K^T (16-bit tiles: ks*16 + half*8 + 2*t4).
__device__ __forceinline__ int decode_fp8_q_dim(int ks, int half, int t4) {
  return ks * 16 + 4 * t4 + 2 * half;
}

// Two e4m3 codes (low byte first) as a packed pair of T, exactly.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint32_t codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const uint32_t f16x2 = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  if constexpr (std::is_same_v<T, __half>) {
    return f16x2;
  } else {
    const __half2 v = *reinterpret_cast<const __half2*>(&f16x2);
    const float2 f = __half22float2(v);
    return ptx::pack2<__nv_bfloat16>(f.x, f.y);
  }
}

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// S = Q K^T of one fp8 K tile at kbase, in two mma chains (even and odd k-steps), as the
// 16-bit path does; qf holds Q in the decode_fp8_q_dim order.
template <typename T, int D>
__device__ __forceinline__ void fp8_qk(uint32_t kbase, const uint32_t (&qf)[D / 16][4],
                                       float (&s)[2][4], float (&s2)[2][4], int lane) {
  using L = Fp8Tile<D>;
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint32_t w = lds32(L::addr(kbase, nt * 8 + g, ks) + 4 * t4);
      const uint32_t b0 = e4m3x2_to<T>(w);
      const uint32_t b1 = e4m3x2_to<T>(w >> 16);
      if (ks & 1) {
        ptx::mma_16816<T>(s2[nt], qf[ks], b0, b1);
      } else {
        ptx::mma_16816<T>(s[nt], qf[ks], b0, b1);
      }
    }
  }
}

// O += P V of one fp8 V tile at vbase; o in the relabelled order (see the top).
template <typename T, int D>
__device__ __forceinline__ void fp8_pv(uint32_t vbase, const uint32_t (&pa)[4],
                                       float (&o)[D / 8][4], int lane) {
  using L = Fp8Tile<D>;
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    const int chunk = 2 * c + (g >> 2);
    const uint32_t in_chunk = 4 * (g & 3);
    const uint32_t w0 = lds32(L::addr(vbase, 2 * t4, chunk) + in_chunk);
    const uint32_t w1 = lds32(L::addr(vbase, 2 * t4 + 1, chunk) + in_chunk);
    const uint32_t w2 = lds32(L::addr(vbase, 2 * t4 + 8, chunk) + in_chunk);
    const uint32_t w3 = lds32(L::addr(vbase, 2 * t4 + 9, chunk) + in_chunk);
    // Byte k of each word is dim 32c + 4g + k: pair keys (2t, 2t+1) and (2t+8, 2t+9) per dim.
    const uint32_t lo01 = byte_perm(w0, w1, 0x5140u);  // dims +0, +1
    const uint32_t hi01 = byte_perm(w0, w1, 0x7362u);  // dims +2, +3
    const uint32_t lo23 = byte_perm(w2, w3, 0x5140u);
    const uint32_t hi23 = byte_perm(w2, w3, 0x7362u);
    ptx::mma_16816<T>(o[4 * c + 0], pa, e4m3x2_to<T>(lo01), e4m3x2_to<T>(lo23));
    ptx::mma_16816<T>(o[4 * c + 1], pa, e4m3x2_to<T>(lo01 >> 16), e4m3x2_to<T>(lo23 >> 16));
    ptx::mma_16816<T>(o[4 * c + 2], pa, e4m3x2_to<T>(hi01), e4m3x2_to<T>(hi23));
    ptx::mma_16816<T>(o[4 * c + 3], pa, e4m3x2_to<T>(hi01 >> 16), e4m3x2_to<T>(hi23 >> 16));
  }
}

// Moves the accumulators of fp8_pv's order back to the mma layout (o[nt][2hr + e] = dim
// nt*8 + 2*t4 + e) and multiplies them by v_scale. In group c, lane quad-index t holds dims
// 32c + 8t + i (i = 4e + jj in o[4c + jj][2hr + e]); the mma layout wants dims 32c + 8jj +
// 2t + {0, 1}, which lane jj of the quad holds: a 4 x 4 transpose of pairs, three xor rounds.
template <int D>
__device__ __forceinline__ void fp8_restore_o(float (&o)[D / 8][4], float v_scale, int lane) {
  const int t4 = lane & 3;
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float P[8];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        P[jj] = o[4 * c + jj][2 * hr];
        P[4 + jj] = o[4 * c + jj][2 * hr + 1];
      }
      float S[4][2];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int q = t4 ^ r;  // the partner; it needs my dims 8t4 + 2q, +1
        float a = q == 0 ? P[0] : q == 1 ? P[2] : q == 2 ? P[4] : P[6];
        float b = q == 0 ? P[1] : q == 1 ? P[3] : q == 2 ? P[5] : P[7];
        if (r != 0) {
          a = __shfl_xor_sync(0xffffffffu, a, r);
          b = __shfl_xor_sync(0xffffffffu, b, r);
        }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          if (q == jj) {
            S[jj][0] = a;
            S[jj][1] = b;
          }
        }
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        o[4 * c + jj][2 * hr] = S[jj][0] * v_scale;
        o[4 * c + jj][2 * hr + 1] = S[jj][1] * v_scale;
      }
    }
  }
}

}  // namespace kvattn::cuda
