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
// in orders chosen so that each load brings whole fragment registers. The conversion takes
// four codes (one 32-bit word) at a time: the integer form (e4m3x4_to) pairs bytes (0, 2) and
// (1, 3); the hardware one converts the two codes of a 16-bit half (e4m3x4_to_f16_halves reads
// both halves of a word in place; byte permutes choose other pairs).
// - S = Q K^T: the reduction runs over head dims in any order, as long as Q and K agree. In
//   k-step ks the mma k indices {2t, 2t+1} of lane quad-index t stand for dims 16 ks + 4t +
//   {0, 2} and {2t+8, 2t+9} for 16 ks + 4t + {1, 3}, or {0, 1} and {2, 3} where K's pairs
//   are adjacent codes (fp8_q_adjacent: the hardware form at head_dim 128 and 256): one
//   32-bit word of key row n = g (lane / 4) gives both B registers; Q's A registers are read
//   with the same map (decode_fp8_q_dim: the first dim of a pair, the second
//   fp8_q_pair_step further).
// - O = P V: the mma n index (a head dim of O) is free to relabel as long as O is relabelled
//   back. In 32-dim group c, n-tile j = 4c + jj, n index g stands for dim 32c + 4g + jj: one
//   word of each of the keys 2t, 2t+1, 2t+8, 2t+9 (dims 32c + 4g ..) holds the B registers
//   of all four n-tiles of the group (byte permutes pair the keys). After the last tile the
//   accumulators are moved back to the mma layout inside each lane quad (fp8_restore_o).
// The hardware conversion (kHw, DecodeParams::fp8_hw_cvt; fp8_convert.cuh's e4m3x2_to_f16x2)
// yields f16 only: with it P V runs in f16 for every query type (P in [0, 1] is exact to 11
// bits in f16, 8 in bf16; the V codes are exact in both), and K takes it for f16 queries
// (bf16 queries keep e4m3x4_to for S = Q K^T).
// Layout: rows of D bytes at a pitch of D + 16 (decode_tile_pitch): the S reads (eight keys, one
// word of one chunk each) and the P V reads (keys 2t.. at chunks 2c + g/4) land on 32
// different banks at head_dim 64 and 128 alike. The read functions take the layout as their
// last template argument (the TMA form's Fp8TmaTile, decode_tma.cuh: 128-byte rows swizzled,
// as conflict-free at head_dim 128).
//
// The swapped tile (decode_swap_tile.cuh: S^T = K Q^T, O^T += V^T P^T, units of 8 query rows)
// reads the same layout with the same two relabellings:
// - S^T = K Q^T: K is the A operand (rows = keys g and g + 8). Its registers a0 / a2 (key g,
//   k indices 2t.. / 2t+8..) are fp8_qk's two B registers of key g: one word at dims 16 ks +
//   4t; a1 / a3 likewise from key g + 8. Q^T (B: row g) uses decode_fp8_q_dim as Q does
//   (the same `adjacent`).
// - O^T += V^T P^T: V^T is the A operand (rows = head dims, k = keys). In 32-dim group c, row
//   g (+ 8) of m-tile 2c + h stands for dim 32c + 4g + 2h (+ 1): the four words of keys 2t,
//   2t+1, 2t+8, 2t+9 at dims 32c + 4g (the loads of fp8_pv) give the A registers of both
//   m-tiles after the same byte permutes. So lane 4g + t ends holding dims 32c + 4g .. + 3 of
//   query rows 2t, 2t + 1 (fp8_swap_o_dim): whole 4-dim runs, written as they are (no
//   restore step).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/decode/fp8_q_prescale.h"
#include "kernels/cuda/fp8_convert.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

template <int D>
struct Fp8Tile {
  static_assert(D == 64 || D == 128 || D == 256, "fp8 decode tiles: head_dim 64, 128 or 256");
  static constexpr int kChunks = D / 16;                          // 16-byte chunks per row
  static constexpr int kRowBytes = D;
  static constexpr int kPitch = decode_tile_pitch(D, 1);
  static constexpr int kTileBytes = kDecodeTileKeys * kPitch;     // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kElemsPerChunk = 16;
  static constexpr int kKeyStep = 32 / kChunks;                  // keys between a lane's copies
  static constexpr int kCopies = kDecodeTileKeys / kKeyStep;     // copies per lane per K tile
  static_assert(32 % kChunks == 0 && kDecodeTileKeys % kKeyStep == 0);
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    return base + key * kPitch + (chunk << 4);
  }
  // The fragment reads' address: byte `byte` (< 16) of chunk chunk_lane + chunk_const of key
  // row `key` (the two chunk parts with disjoint bits: the lane's and the loop's). Here addr's
  // sum; Fp8TmaTile::read_addr is the XOR form that kXorReads names (fp8_v_words).
  static constexpr bool kXorReads = false;
  __device__ __forceinline__ static uint32_t read_addr(uint32_t base, int key, int chunk_lane,
                                                       int byte, int chunk_const) {
    return addr(base, key, chunk_const + chunk_lane) + static_cast<uint32_t>(byte);
  }
};

// The head dims that the query element pair (k-step ks, half, lane quad-index t4) of an A
// fragment stands for in the fp8 S = Q K^T (16-bit tiles: ks*16 + half*8 + 2*t4 and the next).
// `adjacent` (fp8_q_adjacent: K's pairs are adjacent codes): dims 16 ks + 4 t4 + 2 half and
// the next; else (pairs of bytes (0, 2) and (1, 3)) 16 ks + 4 t4 + half and the one 2 further.
__device__ __forceinline__ int decode_fp8_q_dim(int ks, int half, int t4, bool adjacent) {
  return ks * 16 + 4 * t4 + (adjacent ? 2 * half : half);
}
__device__ __forceinline__ int fp8_q_pair_step(bool adjacent) { return adjacent ? 1 : 2; }

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// Whether K's codes converted by the hardware instruction pair as adjacent codes at head_dim
// D (e4m3x4_to_f16_halves: each 16-bit half read in place, no byte permute): 128 and 256. At
// 64 they keep the integer form's pairing through two byte permutes a word: read in place,
// ptxas gave the swapped CTA-sweep kernel 113 registers instead of 102 and 8x32768 9/3 fp8
// lost 1-2% (H100, docs/perf/NOTES.md session 47).
template <int D>
inline constexpr bool kFp8AdjacentK = D != 64;

// The K codes of one 32-bit word in the query type T: by the hardware conversion when kHw and
// T is f16, as pairs of adjacent codes (bytes (0, 1), (2, 3)) where kFp8AdjacentK<D>, else
// paired as e4m3x4_to pairs them ((0, 2), (1, 3)). Q's dim order follows (decode_fp8_q_dim's
// `adjacent`, chosen by fp8_q_adjacent).
template <typename T, int D, bool kHw>
__device__ __forceinline__ void fp8_k_pairs(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (kHw && std::is_same_v<T, __half> && kFp8AdjacentK<D>) {
    e4m3x4_to_f16_halves(w, lo, hi);
  } else if constexpr (kHw && std::is_same_v<T, __half>) {
    lo = e4m3x2_to_f16x2(byte_perm(w, 0, 0x20u));
    hi = e4m3x2_to_f16x2(byte_perm(w, 0, 0x31u));
  } else {
    e4m3x4_to<T>(w, lo, hi);
  }
}

// bf16 query registers (pairs of any fragment layout) rewritten in place as f16 pairs times
// 2^-e, so that S = Q K^T can run in f16 with K from the hardware conversion
// (DecodeParams::fp8_q_f16). e is one value for the warp (fp8_q_prescale_exp of its largest
// |q|: that lands in [2^14, 2^15), no overflow; values down to 2^-10 of it keep f16's 11 bits,
// smaller ones lose bits that weigh less than bf16's own rounding of the largest). Returns 2^e,
// to multiply into the unit's softmax scale. Every lane of the warp must call it.
template <int R, int C>
__device__ __forceinline__ float fp8_q_to_f16(uint32_t (&q)[R][C]) {
  float mx = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(q[r][c] << 16)),
                           fabsf(__uint_as_float(q[r][c] & 0xffff0000u))));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  const int e = fp8_q_prescale_exp(mx);
  const float down = ldexpf(1.0f, -e);
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      q[r][c] = ptx::pack2<__half>(__uint_as_float(q[r][c] << 16) * down,
                                   __uint_as_float(q[r][c] & 0xffff0000u) * down);
    }
  }
  return ldexpf(1.0f, e);
}

// Whether S = Q K^T of an fp8 tile runs in f16 on bf16 queries rewritten by fp8_q_to_f16.
// head_dim 64 and 128. (Session 16 left 64 out: the extra path then took the swapped fp8
// kernel from 80 to 102 registers. Session 40, with the CTA sweep's per-thread copy share,
// ptxas gives the default fp8 d64 kernel 102 registers with it against 108 before.)
template <typename T, typename KV, int D>
__device__ __forceinline__ bool fp8_q_in_f16(const DecodeParams& p) {
  if constexpr (sizeof(KV) == 1 && (D == 64 || D == 128) && std::is_same_v<T, __nv_bfloat16>) {
    return p.fp8_q_f16 != 0;
  } else {
    return false;
  }
}

// Whether S = Q K^T of an fp8 tile reads K as pairs of adjacent codes (fp8_k_pairs): the
// hardware conversion (f16 queries with fp8_hw_cvt, bf16 ones rewritten in f16: fp8_q_in_f16,
// as attend_tile / attend_tile_swap choose) at a head_dim of kFp8AdjacentK. Q's dims are then
// loaded in the adjacent order (decode_fp8_q_dim).
template <typename T, typename KV, int D>
__device__ __forceinline__ bool fp8_q_adjacent(const DecodeParams& p) {
  if constexpr (!kFp8AdjacentK<D>) {
    return false;
  } else if constexpr (std::is_same_v<T, __half>) {
    return p.fp8_hw_cvt != 0;
  } else {
    return fp8_q_in_f16<T, KV, D>(p);
  }
}

// The mma operand type of P V: f16 with the hardware conversion, else the query type.
template <typename T, bool kHw>
using Fp8PvType = std::conditional_t<kHw, __half, T>;

// S = Q K^T of one fp8 K tile at kbase, in two mma chains (even and odd k-steps), as the
// 16-bit path does; qf holds Q in the decode_fp8_q_dim order.
template <typename T, int D, bool kHw = false, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_qk(uint32_t kbase, const uint32_t (&qf)[D / 16][4],
                                       float (&s)[2][4], float (&s2)[2][4], int lane) {
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint32_t w = lds32(L::read_addr(kbase, nt * 8 + g, 0, 4 * t4, ks));
      uint32_t b0, b1;  // dims 16 ks + 4 t4 + {0, 2} and + {1, 3} (adjacent: {0, 1}, {2, 3})
      fp8_k_pairs<T, D, kHw>(w, b0, b1);
      if (ks & 1) {
        ptx::mma_16816<T>(s2[nt], qf[ks], b0, b1);
      } else {
        ptx::mma_16816<T>(s[nt], qf[ks], b0, b1);
      }
    }
  }
}

// Lane (g, t4)'s V values of 32-dim group c of the fp8 V tile at vbase, converted to T pairs:
// b[k][0] = dim 32c + 4g + k of keys (2t, 2t+1), b[k][1] = of keys (2t+8, 2t+9). Byte k of
// each 32-bit word read is dim 32c + 4g + k; [w0.b0, w0.b1, w1.b0, w1.b1]: e4m3x4_to pairs
// bytes (0, 2) = dim +0 of keys (2t, 2t+1) and (1, 3) = dim +1; 0x7632: dims +2, +3.
// (fp8_pv uses them as B registers, fp8_pv_swap as A registers.)
// The four words fp8_v_pairs reads: dims 32c + 4g .. + 3 of keys 2t, 2t+1, 2t+8, 2t+9. (Spelled
// out: as a loop over a key table, ptxas gave the swapped fp8 kernels 106 registers instead of
// 80 at head_dim 64, and 122 instead of 120 at 128.)
template <int D, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_v_words(uint32_t vbase, int c, int g, int t4,
                                            uint32_t (&w)[4]) {
  if constexpr (L::kXorReads) {
    const int lane_chunk = g >> 2;  // chunk 2c + g / 4: the lane's bit 0, the loop's bits 1-
    const int in_chunk = 4 * (g & 3);
    w[0] = lds32(L::read_addr(vbase, 2 * t4, lane_chunk, in_chunk, 2 * c));
    w[1] = lds32(L::read_addr(vbase, 2 * t4 + 1, lane_chunk, in_chunk, 2 * c));
    w[2] = lds32(L::read_addr(vbase, 2 * t4 + 8, lane_chunk, in_chunk, 2 * c));
    w[3] = lds32(L::read_addr(vbase, 2 * t4 + 9, lane_chunk, in_chunk, 2 * c));
  } else {
    // The same addresses through read_addr gave the padded layout's head_dim 64 kernels other
    // code and their CTA sweep +2-3% (H100, session 48): this form is the measured one.
    const int chunk = 2 * c + (g >> 2);
    const uint32_t in_chunk = 4 * (g & 3);
    w[0] = lds32(L::addr(vbase, 2 * t4, chunk) + in_chunk);
    w[1] = lds32(L::addr(vbase, 2 * t4 + 1, chunk) + in_chunk);
    w[2] = lds32(L::addr(vbase, 2 * t4 + 8, chunk) + in_chunk);
    w[3] = lds32(L::addr(vbase, 2 * t4 + 9, chunk) + in_chunk);
  }
}

template <typename T, int D, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_v_pairs(uint32_t vbase, int c, int g, int t4,
                                            uint32_t (&b)[4][2]) {
  uint32_t w[4];
  fp8_v_words<D, L>(vbase, c, g, t4, w);
  const uint32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
  e4m3x4_to<T>(byte_perm(w0, w1, 0x5410u), b[0][0], b[1][0]);
  e4m3x4_to<T>(byte_perm(w0, w1, 0x7632u), b[2][0], b[3][0]);
  e4m3x4_to<T>(byte_perm(w2, w3, 0x5410u), b[0][1], b[1][1]);
  e4m3x4_to<T>(byte_perm(w2, w3, 0x7632u), b[2][1], b[3][1]);
}

// fp8_v_pairs as f16 pairs by the hardware conversion: b[k][0] = dim 32c + 4g + k of keys (2t,
// 2t+1) is bytes k of w0 and w1, b[k][1] of w2 and w3. One byte permute interleaves two keys'
// bytes 0-1 (selector 0x5140: w0.b0, w1.b0, w0.b1, w1.b1), another bytes 2-3 (0x7362), and the
// conversion reads each 16-bit half in place (e4m3x4_to_f16_halves): 2 permutes a key pair and
// group instead of 4.
template <int D, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_v_pairs_f16(uint32_t vbase, int c, int g, int t4,
                                                uint32_t (&b)[4][2]) {
  uint32_t w[4];
  fp8_v_words<D, L>(vbase, c, g, t4, w);
#pragma unroll
  for (int j = 0; j < 2; ++j) {  // keys (2t, 2t+1), then (2t+8, 2t+9)
    e4m3x4_to_f16_halves(byte_perm(w[2 * j], w[2 * j + 1], 0x5140u), b[0][j], b[1][j]);
    e4m3x4_to_f16_halves(byte_perm(w[2 * j], w[2 * j + 1], 0x7362u), b[2][j], b[3][j]);
  }
}

// V's pairs for P V: fp8_v_pairs in T, or fp8_v_pairs_f16 (kHw).
template <typename T, int D, bool kHw, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_v_operands(uint32_t vbase, int c, int g, int t4,
                                               uint32_t (&b)[4][2]) {
  if constexpr (kHw) {
    fp8_v_pairs_f16<D, L>(vbase, c, g, t4, b);
  } else {
    fp8_v_pairs<T, D, L>(vbase, c, g, t4, b);
  }
}

// O += P V of one fp8 V tile at vbase; o in the relabelled order (see the top). pa holds P in
// Fp8PvType<T, kHw>.
template <typename T, int D, bool kHw = false, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_pv(uint32_t vbase, const uint32_t (&pa)[4],
                                       float (&o)[D / 8][4], int lane) {
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    uint32_t b[4][2];  // [dim 32c + 4g + k][keys (2t, 2t+1) / (2t+8, 2t+9)]
    fp8_v_operands<T, D, kHw, L>(vbase, c, g, t4, b);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      ptx::mma_16816<Fp8PvType<T, kHw>>(o[4 * c + jj], pa, b[jj][0], b[jj][1]);
    }
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

// ---- the swapped tile (decode_swap_tile.cuh) ----

// S^T = K Q^T of one fp8 K tile at kbase, in two mma chains (even and odd k-steps); qb holds
// Q^T in the decode_fp8_q_dim order (B registers of row g: dims 16 ks + 4t + {h, h + 2}, or
// with the hardware conversion {2h, 2h + 1}).
template <typename T, int D, bool kHw = false, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_qk_swap(uint32_t kbase, const uint32_t (&qb)[D / 16][2],
                                            float (&s)[4], float (&s2)[4], int lane) {
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint32_t w0 = lds32(L::read_addr(kbase, g, 0, 4 * t4, ks));
    const uint32_t w1 = lds32(L::read_addr(kbase, g + 8, 0, 4 * t4, ks));
    uint32_t ka[4];  // keys g / g + 8 x dims 16 ks + 4t + {0, 2} / {1, 3} (or {0, 1} / {2, 3})
    fp8_k_pairs<T, D, kHw>(w0, ka[0], ka[2]);
    fp8_k_pairs<T, D, kHw>(w1, ka[1], ka[3]);
    if (ks & 1) {
      ptx::mma_16816<T>(s2, ka, qb[ks][0], qb[ks][1]);
    } else {
      ptx::mma_16816<T>(s, ka, qb[ks][0], qb[ks][1]);
    }
  }
}

// O^T += V^T P^T of one fp8 V tile at vbase; pb0 / pb1: P^T's B registers (keys 2t.. / 2t+8..
// of query row g, in Fp8PvType<T, kHw>); o in the relabelled order (see the top:
// fp8_swap_o_dim).
template <typename T, int D, bool kHw = false, class L = Fp8Tile<D>>
__device__ __forceinline__ void fp8_pv_swap(uint32_t vbase, uint32_t pb0, uint32_t pb1,
                                            float (&o)[D / 16][4], int lane) {
  const int g = lane >> 2;
  const int t4 = lane & 3;
#pragma unroll
  for (int c = 0; c < D / 32; ++c) {
    uint32_t b[4][2];  // [dim 32c + 4g + k][keys (2t, 2t+1) / (2t+8, 2t+9)]
    fp8_v_operands<T, D, kHw, L>(vbase, c, g, t4, b);
    // m-tile 2c + h: row g = dim + 2h, row g + 8 = dim + 2h + 1; a0 / a1 keys 2t.., a2 / a3
    // keys 2t+8...
    const uint32_t a0[4] = {b[0][0], b[1][0], b[0][1], b[1][1]};
    const uint32_t a1[4] = {b[2][0], b[3][0], b[2][1], b[3][1]};
    ptx::mma_16816<Fp8PvType<T, kHw>>(o[2 * c], a0, pb0, pb1);
    ptx::mma_16816<Fp8PvType<T, kHw>>(o[2 * c + 1], a1, pb0, pb1);
  }
}

// The head dim that o[mt][e] of fp8_pv_swap stands for in lane 4g + t (query row 2t + (e & 1)):
// 32 (mt / 2) + 4g + 2 (mt % 2) + e / 2. Lane g's dims 32c + 4g + k (k = 0..3) of query row
// 2t + j are o[2c][j], o[2c][j + 2], o[2c + 1][j], o[2c + 1][j + 2].
__host__ __device__ constexpr int fp8_swap_o_dim(int mt, int e, int g) {
  return 32 * (mt >> 1) + 4 * g + 2 * (mt & 1) + (e >> 1);
}

}  // namespace kvattn::cuda
