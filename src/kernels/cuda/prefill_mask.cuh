// The score modifiers of the prefill kernels beyond the plain causal mask: flash-attn's
// window_size, softcap and alibi_slopes (semantics in kvattn/kernels/prefill_attention.h), on
// mma.sync / wgmma C fragments. Layout as in prefill_softmax.cuh: a thread holds rows row0 +
// 16 mt + 8 hr and, in each n8 column tile, columns col0 + 8 nt + {0, 1}.
//
// Scores stay in the kernels' raw units (the softmax multiplies by scale * log2(e)), so every
// modifier is folded into those units once per CTA: softcap turns a raw score s into
// (softcap / scale) * tanh(s * scale / softcap), ALiBi subtracts (slope / scale) * |i + Lk - Lq - j|.
// The softmax and its LSE then see exactly the documented scores.
//
// Cost model: softcap and ALiBi touch every score of every tile (they are part of the score);
// the window mask runs only on the tiles that cross a window edge or the end of Lk
// (ScoreMods::tile_needs_mask), and the key tiles entirely outside every row's window are
// never loaded (prefill_key_tiles).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/prefill_params.h"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda {

// Key tiles [first, first + count) of kBlockN keys that query rows [m0, m_end) of a sequence
// must visit: the union of their rows' visible ranges (each bound grows with the row, so the
// union is one interval).
struct KeyTiles {
  int first = 0;
  int count = 0;
};

// Visible keys of query row i (diag = i + Lk - Lq): [max(0, diag - left), min(Lk, diag + right
// + 1)), a bound only when it is >= 0 (window_right is 0 for causal). 64-bit: a window may be
// as large as INT32_MAX.
__device__ __forceinline__ long long key_lo(long long diag, int window_left) {
  return window_left >= 0 ? max(0LL, diag - window_left) : 0LL;
}
__device__ __forceinline__ long long key_hi(long long diag, int window_right, int Lk) {
  return window_right >= 0 ? min(static_cast<long long>(Lk), diag + window_right + 1)
                           : static_cast<long long>(Lk);
}

template <int kBlockN>
__device__ __forceinline__ KeyTiles prefill_key_tiles(const PrefillParams& p, int m0, int m_end,
                                                      int Lq, int Lk) {
  const long long offset = static_cast<long long>(Lk) - Lq;
  const long long lo = key_lo(m0 + offset, p.window_left);
  const long long hi = key_hi(m_end - 1 + offset, p.window_right, Lk);
  KeyTiles t;
  if (hi > lo) {
    t.first = static_cast<int>(lo / kBlockN);
    t.count = static_cast<int>((hi + kBlockN - 1) / kBlockN) - t.first;
  }
  return t;
}

// One CTA's (or warpgroup's) modifiers, in raw score units.
struct ScoreMods {
  int offset = 0;          // Lk - Lq
  int Lk = 0;
  int window_left = -1;    // -1 = unbounded
  int window_right = -1;   // -1 = unbounded (causal: 0)
  float cap_in = 0.0f;     // softcap: 2 log2(e) scale / softcap
  float cap_out = 0.0f;    // softcap: softcap / scale (0 = off)
  float alibi = 0.0f;      // slope / scale (0 = off)
  int mask_from = 0;       // tiles n >= mask_from cross the right edge or Lk
  int mask_below = 0;      // tiles n < mask_below cross the left edge

  // rows [m0, m_end) of sequence b, query head h, keys [0, Lk).
  template <int kBlockN>
  __device__ __forceinline__ void init(const PrefillParams& p, int b, int h, int m0, int m_end,
                                       int Lq, int Lk_) {
    Lk = Lk_;
    offset = Lk - Lq;
    window_left = p.window_left;
    window_right = p.window_right;
    cap_in = p.softcap_in;
    cap_out = p.softcap_out;
    alibi = p.alibi_slopes != nullptr
                ? __ldg(p.alibi_slopes + static_cast<int64_t>(b) * p.alibi_seq_stride + h) /
                      p.scale
                : 0.0f;
    // Tile n holds keys [n BN, n BN + BN). It needs the mask iff some key is past a row's
    // upper bound (the smallest upper bound is row m0's) or before a row's lower bound (the
    // largest is row m_end - 1's).
    const long long upper = key_hi(static_cast<long long>(m0) + offset, window_right, Lk);
    const long long lower = key_lo(static_cast<long long>(m_end - 1) + offset, window_left);
    mask_from = upper <= 0 ? 0 : static_cast<int>(upper / kBlockN);  // (n + 1) BN > upper
    mask_below = static_cast<int>((lower + kBlockN - 1) / kBlockN);   // n BN < lower
  }

  // Scores in float8_e4m3 code units (an fp8 cache's K read as codes, k_scale folded into the
  // softmax scale): raw = codes x ks, so the modifiers' units change by ks (the same
  // documented scores come out).
  __device__ __forceinline__ void fold_key_scale(float ks) {
    cap_in *= ks;
    cap_out /= ks;
    alibi /= ks;
  }

  __device__ __forceinline__ bool tile_needs_mask(int n) const {
    return n >= mask_from || n < mask_below;
  }

  // softcap * tanh(x / softcap) in raw units; tanh(y) = 1 - 2 / (e^{2y} + 1) on ex2.approx
  // (relative error ~2^-22; e^{2y} = inf gives exactly 1).
  __device__ __forceinline__ float cap(float s) const {
    const float e = ptx::exp2_approx(s * cap_in);
    return cap_out * (1.0f - __fdividef(2.0f, e + 1.0f));
  }

  // softcap, then ALiBi, on every score of the fragment (call before the mask).
  template <int kMT, int kNT>
  __device__ __forceinline__ void apply_bias(float (&s)[kMT][kNT][4], int row0, int col0) const {
    if (cap_out > 0.0f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = cap(s[mt][nt][e]);
        }
      }
    }
    if (alibi != 0.0f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int diag = row0 + mt * 16 + hr * 8 + offset;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int dist = abs(diag - (col0 + nt * 8 + e));
              s[mt][nt][hr * 2 + e] = fmaf(-alibi, static_cast<float>(dist), s[mt][nt][hr * 2 + e]);
            }
          }
        }
      }
    }
  }

  // -inf for every key outside the row's window or past Lk.
  template <int kMT, int kNT>
  __device__ __forceinline__ void apply_mask(float (&s)[kMT][kNT][4], int row0, int col0) const {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const long long diag = static_cast<long long>(row0 + mt * 16 + hr * 8) + offset;
        const int lo = static_cast<int>(key_lo(diag, window_left));
        const int hi = static_cast<int>(key_hi(diag, window_right, Lk));
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = col0 + nt * 8 + e;
            if (col < lo || col >= hi) s[mt][nt][hr * 2 + e] = -INFINITY;
          }
        }
      }
    }
  }
};

}  // namespace kvattn::cuda
