// The score modifiers of the decode kernels' extended form (template flag kExt): flash-attn's
// window_size, softcap and alibi_slopes (semantics in kvattn/kernels/decode_attention.h), on
// one warp's 16-row x 16-key C fragment (lane: rows gid and gid + 8, keys 8 nt + 2 t4 + {0, 1}),
// or the swapped tile's 16-key x 8-row S^T fragment (lane: keys gid and gid + 8, rows 2 t4 and
// 2 t4 + 1; decode_swap_tile.cuh).
//
// Units: the decode kernels' scores are already in the log2 domain (raw * scale * log2 e, with
// an fp8 cache's k_scale folded in), so softcap becomes (softcap log2 e) tanh(s / (softcap
// log2 e)), i.e. tanh's exponent 2 s / softcap, and ALiBi subtracts (slope log2 e) |diag - j|.
// The order is the CPU backend's: scale, softcap, ALiBi, mask.
//
// Work: the tiles before a sequence's first key (its cache_leftpad, or the window's edge for
// its first query row, whichever is later) are never issued: the kernels' tile ranges start
// at first_tile, and the keys of that tile before it are zero-filled without reading their
// block ids' pages. Only tiles that cross a row's window edge or its upper bound run the mask;
// softcap and ALiBi touch every score (they are part of it).
// cache_leftpad only raises every row's lower bound: bottom-right alignment, the window and
// ALiBi's distance are the same in cache positions as counted from the pad.
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"

namespace kvattn::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Sequence b's cache_leftpad for a length of `len` keys: 0 without one; a value outside
// [0, len] is clamped, and recorded when `report`.
__device__ __forceinline__ int seq_pad(const DecodeParams& p, int b, int len, bool report = false) {
  if (p.cache_leftpad == nullptr) return 0;
  const int pad = __ldg(p.cache_leftpad + b);
  if (pad < 0 || pad > len) {
    if (report) record_fault(p.fault_word, kFaultLeftpadOutOfRange);
    return pad < 0 ? 0 : len;
  }
  return pad;
}

// The first key that any query row of sequence b (`len` keys) sees: its pad, or row 0's
// window edge (bottom-right aligned) when later. May be len (no key; keys from it are read).
__device__ __forceinline__ int first_key(const DecodeParams& p, int b, int len) {
  const int pad = seq_pad(p, b, len);
  return p.window_left >= 0 ? max(pad, len - p.q_len - p.window_left) : pad;
}

// The key tiles of sequence b (`len` keys) that the kernels visit: [first tile, tiles_of(len)),
// at least one when len > 0 (a sequence whose pad is len then runs one tile of masked keys,
// none read, so every row gets its zeros and -inf LSE the usual way).
template <bool kExt>
__device__ __forceinline__ int first_tile(const DecodeParams& p, int b, int len) {
  if constexpr (kExt) {
    return min(first_key(p, b, len), max(len - 1, 0)) / kDecodeTileKeys;
  } else {
    return 0;
  }
}
template <bool kExt>
__device__ __forceinline__ int visited_tiles(const DecodeParams& p, int b, int len) {
  return tiles_of(len) - first_tile<kExt>(p, b, len);
}

// One warp's rows of one sequence: their visible key ranges, ALiBi slopes and the warp-wide
// bounds that decide which tiles need the mask (and which need no work at all).
struct DecodeMods {
  int lo[2], hi[2];  // row hr sees keys [lo, hi) (empty when hi <= lo)
  int diag[2];       // i + Lk - Lq
  float slope[2];    // ALiBi slope * log2(e)
  int max_lo = 0;    // a tile needs the mask iff key0 < max_lo or key0 + 16 > min_hi
  int min_hi = 0;
  int warp_lo = 0;   // no row of the warp sees a key outside [warp_lo, warp_hi)
  int warp_hi = 0;

  // Rows of unit (kvh, row chunk rc), lane row group gid, sequence b of `len` keys.
  __device__ __forceinline__ void init(const DecodeParams& p, int b, int len, int kvh, int rc,
                                       int gid) {
    init_rows(p, b, len, kvh, rc * kDecodeRows + gid, rc * kDecodeRows + gid + 8);
  }

  // The lane's two rows r0, r1 of KV head kvh (unit-wide row indices), sequence b of `len`
  // keys. The padding rows past p.rows take the last real row's bounds (their output is never
  // stored), so they widen nothing.
  __device__ __forceinline__ void init_rows(const DecodeParams& p, int b, int len, int kvh,
                                            int r0, int r1) {
    const int pad = seq_pad(p, b, len);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = min(hr == 0 ? r0 : r1, p.rows - 1);
      const int i = r / p.group;
      const int head = kvh * p.group + (r - i * p.group);
      diag[hr] = i + len - p.q_len;
      lo[hr] = p.window_left >= 0 ? max(pad, diag[hr] - p.window_left) : pad;
      hi[hr] = p.window_right >= 0 ? min(len, diag[hr] + p.window_right + 1) : len;
      slope[hr] = p.alibi_slopes != nullptr
                      ? __ldg(p.alibi_slopes + static_cast<int64_t>(b) * p.alibi_seq_stride + head) *
                            kLog2e
                      : 0.0f;
    }
    max_lo = __reduce_max_sync(0xffffffffu, max(lo[0], lo[1]));
    min_hi = __reduce_min_sync(0xffffffffu, min(hi[0], hi[1]));
    warp_lo = __reduce_min_sync(0xffffffffu, min(lo[0], lo[1]));
    warp_hi = __reduce_max_sync(0xffffffffu, max(hi[0], hi[1]));
  }

  // Whether the tile of keys [key0, key0 + 16) holds a key some row of the warp sees.
  __device__ __forceinline__ bool tile_has_work(int key0) const {
    return key0 < warp_hi && key0 + kDecodeTileKeys > warp_lo;
  }

  // softcap, ALiBi, then the mask, on the log2-domain scores s of keys key0 + 8 nt + 2 t4 + e.
  __device__ __forceinline__ void apply(const DecodeParams& p, float (&s)[2][4], int key0,
                                        int t4) const {
    if (p.softcap_out > 0.0f) {
      // tanh(y) = 1 - 2 / (e^{2y} + 1) on ex2.approx (e^{2y} = inf gives exactly 1).
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = fast_exp2(s[nt][e] * p.softcap_in);
          s[nt][e] = p.softcap_out * (1.0f - __fdividef(2.0f, x + 1.0f));
        }
      }
    }
    if (p.alibi_slopes != nullptr) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
          s[nt][e] = fmaf(-slope[e >> 1], static_cast<float>(abs(diag[e >> 1] - key)), s[nt][e]);
        }
      }
    }
    if (key0 < max_lo || key0 + kDecodeTileKeys > min_hi) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
          if (key < lo[e >> 1] || key >= hi[e >> 1]) s[nt][e] = kNegInf;
        }
      }
    }
  }

  // The same on the swapped tile's S^T: s[e] is key key0 + gid + 8 (e / 2) of row hr = e % 2.
  __device__ __forceinline__ void apply_swap(const DecodeParams& p, float (&s)[4], int key0,
                                             int gid) const {
    if (p.softcap_out > 0.0f) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = fast_exp2(s[e] * p.softcap_in);
        s[e] = p.softcap_out * (1.0f - __fdividef(2.0f, x + 1.0f));
      }
    }
    if (p.alibi_slopes != nullptr) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + gid + 8 * (e >> 1);
        s[e] = fmaf(-slope[e & 1], static_cast<float>(abs(diag[e & 1] - key)), s[e]);
      }
    }
    if (key0 < max_lo || key0 + kDecodeTileKeys > min_hi) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + gid + 8 * (e >> 1);
        if (key < lo[e & 1] || key >= hi[e & 1]) s[e] = kNegInf;
      }
    }
  }
};

}  // namespace
}  // namespace kvattn::cuda
