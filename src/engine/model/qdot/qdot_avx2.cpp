// AVX2 (+FMA, F16C) kernels. Only called after best_isa() saw AVX2; every function carries
// its target attribute, so this file builds without -mavx2 and nothing here leaks into
// code that runs on older CPUs. The float steps follow qdot.h's fixed order exactly.
#include <immintrin.h>

#include "engine/model/qdot/qdot_impl.h"

namespace kvattn::qdot::detail {
namespace {

#define KVATTN_QDOT_AVX2 __attribute__((target("avx2,fma,f16c")))

KVATTN_QDOT_AVX2 inline float half(const uint8_t* p) { return _cvtsh_ss(u16_at(p)); }

KVATTN_QDOT_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// reduce16 of (even-block lanes a, odd-block lanes b): a[i]+b[i], then +4, +2, +1 apart.
KVATTN_QDOT_AVX2 inline float reduce_pair(__m256 a, __m256 b) {
  const __m256 s = _mm256_add_ps(a, b);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// 16 packed bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high ones.
KVATTN_QDOT_AVX2 inline __m256i nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Per-4-element int32 lanes of w . x: signed w (sign trick) or unsigned w.
template <bool kSigned>
KVATTN_QDOT_AVX2 inline __m256i lanes4(__m256i w, __m256i x) {
  __m256i p;
  if constexpr (kSigned) {
    p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  } else {
    p = _mm256_maddubs_epi16(w, x);
  }
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// The exact int32 lanes of w . X, X = 16384 q + 128 r + t (qdot.h), from three int8 dots.
template <bool kSigned>
KVATTN_QDOT_AVX2 inline __m256i lanes22(__m256i w, const int8_t* q, const int8_t* r,
                                        const int8_t* t) {
  const __m256i lq = lanes4<kSigned>(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  const __m256i lr = lanes4<kSigned>(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)));
  const __m256i lt = lanes4<kSigned>(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t)));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(lq, 14), _mm256_slli_epi32(lr, 7)), lt);
}

template <Kind K, int R>
KVATTN_QDOT_AVX2 void dot32(const uint8_t* w, const ActRow* x, int64_t n, float* out,
                            int64_t ldo) {
  constexpr int64_t kBytes = K == kQ4_0 ? kBytesQ4_0 : K == kQ4_1 ? kBytesQ4_1 : kBytesQ8_0;
  const int64_t nb = n / 32;
  __m256 acc[R][2];
  float mins[R];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    mins[r] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBytes;
    // rows are nb * kBytes apart and read one after another (see kPrefetchRows)
    _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchRows * nb * kBytes), _MM_HINT_T0);
    const float d = half(blk);
    __m256i wv;
    if constexpr (K == kQ4_0) {
      wv = _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8));
    } else if constexpr (K == kQ4_1) {
      wv = nibbles(blk + 4);
    } else {
      wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    }
    for (int r = 0; r < R; ++r) {
      const int64_t o = b * 32;
      const __m256i l = lanes22<K != kQ4_1>(wv, x[r].q32 + o, x[r].r32 + o, x[r].t32 + o);
      __m256& a = acc[r][b & 1];
      a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_cvtepi32_ps(l),
                                         _mm256_set1_ps(d * (x[r].d32[b] * 0x1p-14f))));
      if constexpr (K == kQ4_1) mins[r] = mins[r] + half(blk + 2) * x[r].s32[b];
    }
  }
  for (int r = 0; r < R; ++r) out[r * ldo] = reduce_pair(acc[r][0], acc[r][1]) + mins[r];
}

// `W` weight rows, `stride` bytes apart, against one activation row.
template <Kind K, int W>
KVATTN_QDOT_AVX2 void dot32_rows(const uint8_t* w, int64_t stride, const ActRow& x, int64_t n,
                                 float* out) {
  constexpr int64_t kBytes = K == kQ4_0 ? kBytesQ4_0 : K == kQ4_1 ? kBytesQ4_1 : kBytesQ8_0;
  const int64_t nb = n / 32;
  __m256 acc[W][2];
  float mins[W];
  for (int i = 0; i < W; ++i) {
    acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    mins[i] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t o = b * 32;
    const float dx = x.d32[b] * 0x1p-14f;
    for (int i = 0; i < W; ++i) {
      const uint8_t* blk = w + i * stride + b * kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchRows * stride), _MM_HINT_T0);
      __m256i wv;
      if constexpr (K == kQ4_0) {
        wv = _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8));
      } else if constexpr (K == kQ4_1) {
        wv = nibbles(blk + 4);
      } else {
        wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      }
      const __m256i l = lanes22<K != kQ4_1>(wv, x.q32 + o, x.r32 + o, x.t32 + o);
      __m256& a = acc[i][b & 1];
      a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_cvtepi32_ps(l), _mm256_set1_ps(half(blk) * dx)));
      if constexpr (K == kQ4_1) mins[i] = mins[i] + half(blk + 2) * x.s32[b];
    }
  }
  for (int i = 0; i < W; ++i) out[i] = reduce_pair(acc[i][0], acc[i][1]) + mins[i];
}

template <Kind K>
void rows32(const uint8_t* w, int64_t stride, int rows, const ActRow& x, int64_t n, float* out) {
  switch (rows) {
    case 1: return dot32_rows<K, 1>(w, stride, x, n, out);
    case 2: return dot32_rows<K, 2>(w, stride, x, n, out);
    case 3: return dot32_rows<K, 3>(w, stride, x, n, out);
    default: return dot32_rows<K, 4>(w, stride, x, n, out);
  }
}

// ---- K super-blocks ----

// The 32 unsigned weights of chunk c (elements 32c .. 32c+31) of a K block, offsets not
// applied (Q3_K: q + 4, Q6_K: q + 32).
KVATTN_QDOT_AVX2 inline __m256i load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
KVATTN_QDOT_AVX2 inline __m256i shr(__m256i v, int s) {
  return _mm256_srl_epi16(v, _mm_cvtsi32_si128(s));
}

template <Kind K>
KVATTN_QDOT_AVX2 inline __m256i chunk(const uint8_t* blk, int c) {
  const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
  if constexpr (K == kQ2_K) {
    return _mm256_and_si256(shr(load(blk + 16 + 32 * (c / 4)), 2 * (c % 4)), m2);
  } else if constexpr (K == kQ3_K) {
    const __m256i lo = _mm256_and_si256(shr(load(blk + 32 + 32 * (c / 4)), 2 * (c % 4)), m2);
    const __m256i hi = _mm256_and_si256(shr(load(blk), 4 * (c / 4) + c % 4), m1);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
  } else if constexpr (K == kQ4_K) {
    return _mm256_and_si256(shr(load(blk + 16 + 32 * (c / 2)), 4 * (c % 2)), m4);
  } else if constexpr (K == kQ5_K) {
    const __m256i lo = _mm256_and_si256(shr(load(blk + 48 + 32 * (c / 2)), 4 * (c % 2)), m4);
    const __m256i hi = _mm256_and_si256(shr(load(blk + 16), c), m1);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  } else {  // Q6_K
    const int h = c / 4, k = c % 4;
    const __m256i lo = _mm256_and_si256(shr(load(blk + 64 * h + 32 * (k % 2)), 4 * (k / 2)), m4);
    const __m256i hi = _mm256_and_si256(shr(load(blk + 128 + 32 * h), 2 * k), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
}

// Scales, mins, offset and d/dmin of one K block (plain integer/fp16 decoding).
struct KHead {
  int16_t sc[16];
  int16_t mn[16];
  int offset;
  float d, dmin;
};

template <Kind K>
KVATTN_QDOT_AVX2 inline void head(const uint8_t* blk, KHead* h) {
  h->offset = 0;
  h->dmin = 0.0f;
  if constexpr (K == kQ2_K) {
    for (int g = 0; g < 16; ++g) {
      h->sc[g] = blk[g] & 0x0F;
      h->mn[g] = blk[g] >> 4;
    }
    h->d = half(blk + 80);
    h->dmin = half(blk + 82);
  } else if constexpr (K == kQ3_K) {
    int8_t s[16];
    q3k_scales(blk + 96, s);
    for (int g = 0; g < 16; ++g) {
      h->sc[g] = s[g];
      h->mn[g] = 0;
    }
    h->offset = 4;
    h->d = half(blk + 108);
  } else if constexpr (K == kQ4_K || K == kQ5_K) {
    uint8_t s[8], m[8];
    k4_scales(blk + 4, s, m);
    for (int g = 0; g < 16; ++g) {
      h->sc[g] = s[g / 2];
      h->mn[g] = m[g / 2];
    }
    h->d = half(blk);
    h->dmin = half(blk + 2);
  } else {
    for (int g = 0; g < 16; ++g) {
      h->sc[g] = static_cast<int8_t>(blk[192 + g]);
      h->mn[g] = 0;
    }
    h->offset = 32;
    h->d = half(blk + 208);
  }
}

template <Kind K>
constexpr int64_t k_bytes() {
  return K == kQ2_K ? kBytesQ2_K : K == kQ3_K ? kBytesQ3_K : K == kQ4_K ? kBytesQ4_K
       : K == kQ5_K ? kBytesQ5_K : kBytesQ6_K;
}

template <Kind K, int R>
KVATTN_QDOT_AVX2 void dot256(const uint8_t* w, const ActRow* x, int64_t n, float* out,
                             int64_t ldo) {
  const int64_t nb = n / 256;
  float res[R];
  for (int r = 0; r < R; ++r) res[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * k_bytes<K>();
    KHead h;
    head<K>(blk, &h);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i u = chunk<K>(blk, c);
      const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(h.sc[2 * c + 1]), _mm_set1_epi16(h.sc[2 * c]));
      for (int r = 0; r < R; ++r) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].qk + b * 256 + 32 * c));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), sc));
      }
    }
    for (int r = 0; r < R; ++r) {
      const int16_t* bs = x[r].bsum16 + b * 16;
      int32_t off = 0, summ = 0;
      for (int g = 0; g < 16; ++g) {
        off += h.sc[g] * bs[g];
        summ += h.mn[g] * bs[g];
      }
      const int32_t sumi = hsum_i32(isum[r]) - h.offset * off;
      res[r] = k_step(res[r], h.d, h.dmin, x[r].dk[b], sumi, summ);
    }
  }
  for (int r = 0; r < R; ++r) out[r * ldo] = res[r];
}

template <template <Kind, int> class Fn, Kind K>
struct Rows {
  static void run(const uint8_t* w, const ActRow* x, int rows, int64_t n, float* out,
                  int64_t ldo) {
    switch (rows) {
      case 1: return Fn<K, 1>::run(w, x, n, out, ldo);
      case 2: return Fn<K, 2>::run(w, x, n, out, ldo);
      case 3: return Fn<K, 3>::run(w, x, n, out, ldo);
      default: return Fn<K, 4>::run(w, x, n, out, ldo);
    }
  }
};
template <Kind K, int R>
struct D32 {
  static void run(const uint8_t* w, const ActRow* x, int64_t n, float* out, int64_t ldo) {
    dot32<K, R>(w, x, n, out, ldo);
  }
};
template <Kind K, int R>
struct D256 {
  static void run(const uint8_t* w, const ActRow* x, int64_t n, float* out, int64_t ldo) {
    dot256<K, R>(w, x, n, out, ldo);
  }
};

// x = q * d (+ m): a product then a sum, as dequantize_row's float32 code (no fused FMA).
template <Kind K>
KVATTN_QDOT_AVX2 void dequant32(const uint8_t* src, float* dst, int64_t n) {
  constexpr int64_t kBytes = K == kQ4_0 ? kBytesQ4_0 : K == kQ4_1 ? kBytesQ4_1 : kBytesQ8_0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * kBytes;
    const __m256 d = _mm256_set1_ps(half(blk));
    __m256i q;
    if constexpr (K == kQ4_0) {
      q = _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8));
    } else if constexpr (K == kQ4_1) {
      q = nibbles(blk + 4);
    } else {
      q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    }
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; ++k) {
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d);
      if constexpr (K == kQ4_1) v = _mm256_add_ps(v, _mm256_set1_ps(half(blk + 2)));
      _mm256_storeu_ps(dst + b * 32 + 8 * k, v);
    }
  }
}

}  // namespace

bool dequantize_avx2(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::kQ4_0: dequant32<kQ4_0>(src, dst, n); return true;
    case GgmlType::kQ4_1: dequant32<kQ4_1>(src, dst, n); return true;
    case GgmlType::kQ8_0: dequant32<kQ8_0>(src, dst, n); return true;
    default: return false;
  }
}

const Table& avx2_table() {
  static const Table t{{Rows<D32, kQ4_0>::run, Rows<D32, kQ4_1>::run, Rows<D32, kQ8_0>::run,
                        Rows<D256, kQ2_K>::run, Rows<D256, kQ3_K>::run, Rows<D256, kQ4_K>::run,
                        Rows<D256, kQ5_K>::run, Rows<D256, kQ6_K>::run},
                       {rows32<kQ4_0>, rows32<kQ4_1>, rows32<kQ8_0>}};
  return t;
}

}  // namespace kvattn::qdot::detail
