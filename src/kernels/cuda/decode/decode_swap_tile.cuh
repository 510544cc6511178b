// The swapped warp tile of the split kernel ("swap AB", docs/notes/decode-next.md): for units
// of 8 query rows over 16-bit caches, a warp computes S^T = K Q^T and O^T += V^T P^T,
// so the keys (and, for PV, the head dims) fill the 16-row M side of m16n8k16 and the query
// rows its N = 8 side. Against attend_tile (decode_warp_tile.cuh), whose 16 M rows are mostly
// padding at a GQA group of 1-8 and q_len 1, a 16-key tile takes half the mma instructions,
// and a lane holds half the output (O^T: D/16 x 4 floats) and half the query (Q^T: D/16 x 2
// registers), so the kernel needs fewer registers; head_dim 256 runs on this tile only.
//
// Lane 4g + t (g = lane / 4, t = lane % 4) holds:
//   S^T tile   s[e]: key key0 + g + 8 (e / 2), query row 2t + (e % 2);
//   O^T        o[mt][e]: head dim 16 mt + g + 8 (e / 2), query row 2t + (e % 2);
//   Q^T        qb[ks][h]: row g, dims 16 ks + 8 h + 2t, +1 (the mma's B operand);
//   m[j], l[j] of query row 2t + j (l summed over the lane's own keys only).
// P^T reaches the PV mma's B layout (keys 2t..2t+1 of row g) through one movmatrix.trans per
// 8-key half.
// float8_e4m3 caches (KV = uint8_t) read the fp8 layout (decode_fp8.cuh: fp8_qk_swap,
// fp8_pv_swap): Q^T's dims are relabelled as decode_fp8_q_dim says, and O^T's rows stand for
// the dims of fp8_swap_o_dim (not 16 mt + g + 8 (e / 2)); the kernel writes them there.
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_mask.cuh"

namespace kvattn::cuda {
namespace {

using ptx::movmatrix_trans;

// Query rows per unit in the swapped tile: the mma's N.
inline constexpr int kSwapRows = kDecodeSwapRows;

// Loads row `r` (lane row g) of the unit's queries as Q^T B fragments; zeros when !valid and
// for the dims from head_dim on (a padded tile). fp8 caches (kFp8): the dims of
// decode_fp8_q_dim (no padded tiles there).
// fp8_adjacent: decode_fp8_q_dim's order where K's pairs are adjacent codes (fp8_q_adjacent).
template <int D, bool kFp8 = false>
__device__ __forceinline__ void load_q_swap(uint32_t (&qb)[D / 16][2], const uint16_t* qrow,
                                            bool valid, int t4, int head_dim,
                                            bool fp8_adjacent = false) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t v = 0;
      const int d = kFp8 ? decode_fp8_q_dim(ks, h, t4, fp8_adjacent) : ks * 16 + h * 8 + 2 * t4;
      const int d2 = d + (kFp8 ? fp8_q_pair_step(fp8_adjacent) : 1);
      // fp8: dims 16 ks .. 16 ks + 15 (decode_fp8_q_dim) are all in or all out, head_dim a
      // multiple of 16 (80 and 96 on the 128 tile).
      if (valid && (kFp8 ? ks * 16 < head_dim : d < head_dim)) {
        v = static_cast<uint32_t>(qrow[d]) | (static_cast<uint32_t>(qrow[d2]) << 16);
      }
      qb[ks][h] = v;
    }
  }
}

// One warp's step over a landed 16-key tile at kbase (V at kbase + kTileBytes): S^T = K Q^T,
// causal mask (key j visible to row 2t + j' iff j < limit[j']), online softmax in the log2
// domain, O^T = O^T * alpha + V^T P^T. kExt: softcap, ALiBi and the window of `mods`
// (DecodeMods::apply_swap) instead of the causal mask. KV: the cache element (uint8_t: fp8).
// L: the stage layout (KvTile, or TmaTile for the TMA form).
template <typename T, typename KV, int D, bool kExt = false, class L = KvTile<KV, D>>
__device__ __forceinline__ void attend_tile_swap(uint32_t kbase, const uint32_t (&qb)[D / 16][2],
                                                 float (&o)[D / 16][4], float (&m)[2],
                                                 float (&l)[2], int key0, const int (&limit)[2],
                                                 int min_limit, float scale_log2, int lane,
                                                 const DecodeParams& p, const DecodeMods& mods) {
  const int gid = lane >> 2;
  [[maybe_unused]] const int mrow = lane & 7;  // ldmatrix rows (16-bit caches)
  [[maybe_unused]] const int mat = lane >> 3;
  const uint32_t vbase = kbase + L::kTileBytes;
  // S^T over D in two independent mma chains (even and odd k-steps). K rows are the A
  // operand: matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15) of the k-step.
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  float s2[4] = {0.f, 0.f, 0.f, 0.f};
  if constexpr (kIsFp8<KV>) {
    if (fp8_q_in_f16<T, KV, D>(p)) {  // Q rewritten in f16 (fp8_q_to_f16): K in f16 as well
      fp8_qk_swap<__half, D, true, L>(kbase, qb, s, s2, lane);
    } else if (p.fp8_hw_cvt) {
      fp8_qk_swap<T, D, true, L>(kbase, qb, s, s2, lane);
    } else {
      fp8_qk_swap<T, D, false, L>(kbase, qb, s, s2, lane);
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t ka[4];
      ldmatrix_x4(ka, L::addr(kbase, (mat & 1) * 8 + mrow, 2 * ks + (mat >> 1)));
      if (ks & 1) {
        mma_16816<T>(s2, ka, qb[ks][0], qb[ks][1]);
      } else {
        mma_16816<T>(s, ka, qb[ks][0], qb[ks][1]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] = (s[e] + s2[e]) * scale_log2;
  if constexpr (kExt) {
    mods.apply_swap(p, s, key0, gid);
  } else if (key0 + kDecodeTileKeys > min_limit) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (key0 + gid + 8 * (e >> 1) >= limit[e & 1]) s[e] = kNegInf;
    }
  }
  // Online softmax of rows 2t and 2t + 1: a row's keys sit in the 8 lanes of one t (xor 4, 8,
  // 16). The rescale runs only when some row of the warp has a new maximum (attend_tile says
  // why that changes no bit).
  float mx[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[j] = fmaxf(s[j], s[j + 2]);
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 4));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 8));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 16));
  }
  if (__any_sync(0xffffffffu, mx[0] > m[0] || mx[1] > m[1])) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float m_new = fmaxf(m[j], mx[j]);
      const float alpha = fast_exp2(m[j] - (m_new == kNegInf ? 0.0f : m_new));
      m[j] = m_new;
      l[j] *= alpha;
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        o[mt][j] *= alpha;
        o[mt][j + 2] *= alpha;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float base = m[j] == kNegInf ? 0.0f : m[j];
    s[j] = fast_exp2(s[j] - base);
    s[j + 2] = fast_exp2(s[j + 2] - base);
    l[j] += s[j] + s[j + 2];
  }
  // P^T as the B operand: keys 2t..2t+1 (then 8 + 2t..) of row g.
  // (fp8 with the hardware conversion: P V in f16, decode_fp8.cuh.)
  const bool pv_f16 = kIsFp8<KV> && p.fp8_hw_cvt;
  auto pack = [pv_f16](float lo, float hi) {
    return pv_f16 ? pack2<__half>(lo, hi) : pack2<T>(lo, hi);
  };
  const uint32_t pb0 = movmatrix_trans(pack(s[0], s[1]));
  const uint32_t pb1 = movmatrix_trans(pack(s[2], s[3]));
  if constexpr (kIsFp8<KV>) {
    if (pv_f16) {
      fp8_pv_swap<T, D, true, L>(vbase, pb0, pb1, o, lane);
    } else {
      fp8_pv_swap<T, D, false, L>(vbase, pb0, pb1, o, lane);
    }
  } else {
    // V^T as the A operand: transposed matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      uint32_t va[4];
      ldmatrix_x4_trans(va, L::addr(vbase, (mat >> 1) * 8 + mrow, 2 * mt + (mat & 1)));
      mma_16816<T>(o[mt], va, pb0, pb1);
    }
  }
}

// l of rows 2t and 2t + 1 summed over the 8 lanes that hold their keys.
__device__ __forceinline__ void reduce_l_swap(const float (&l)[2], float (&lq)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    lq[j] = l[j] + __shfl_xor_sync(0xffffffffu, l[j], 4);
    lq[j] += __shfl_xor_sync(0xffffffffu, lq[j], 8);
    lq[j] += __shfl_xor_sync(0xffffffffu, lq[j], 16);
  }
}

}  // namespace
}  // namespace kvattn::cuda
