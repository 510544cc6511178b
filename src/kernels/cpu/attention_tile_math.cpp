#include "kernels/cpu/attention_tile_math.h"

#include <immintrin.h>

#include <cstring>

namespace kvattn::cpu {
namespace {

// e^x for x <= 0: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes expf
// coefficients), 2^n through the exponent bits. Branch-free so loops over it vectorize.
__attribute__((always_inline)) inline float exp_nonpositive(float x) {
  const float xc = x < -87.3f ? -87.3f : x;
  const float n = __builtin_floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.3f ? 0.0f : p * scale;
}

// The generic row maximum: one compare chain (its scalar latency was as large as the scores
// microkernel of a row; the AVX2 form below keeps 16 lanes).
float max_generic(const float* s, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// The loops, written once; each variant below instantiates them under its own target.
#define KVATTN_TILE_LOOPS(ATTR, SUFFIX)                                                       \
  ATTR void scores_##SUFFIX(const float* q, const float* const* k_rows, int64_t n, int64_t d, \
                            float* s) {                                                       \
    for (int64_t j = 0; j < n; ++j) {                                                         \
      const float* k = k_rows[j];                                                             \
      float lanes[16] = {};                                                                   \
      int64_t x = 0;                                                                          \
      for (; x + 16 <= d; x += 16) {                                                          \
        _Pragma("omp simd") for (int l = 0; l < 16; ++l) lanes[l] += q[x + l] * k[x + l];      \
      }                                                                                       \
      float t = 0.0f;                                                                         \
      for (; x < d; ++x) t += q[x] * k[x];                                                    \
      for (int l = 0; l < 16; ++l) t += lanes[l];                                             \
      s[j] = t;                                                                               \
    }                                                                                         \
  }                                                                                           \
  [[maybe_unused]]                                                                            \
  ATTR float softmax_##SUFFIX(float* s, int64_t n, float m) {                                 \
    float sum = 0.0f;                                                                         \
    _Pragma("omp simd reduction(+ : sum)") for (int64_t j = 0; j < n; ++j) {                  \
      s[j] = exp_nonpositive(s[j] - m);                                                       \
      sum += s[j];                                                                            \
    }                                                                                         \
    return sum;                                                                               \
  }                                                                                           \
  ATTR void axpy_##SUFFIX(float* acc, float corr, const float* p,                             \
                          const float* const* v_rows, int64_t n, int64_t d) {                 \
    _Pragma("omp simd") for (int64_t x = 0; x < d; ++x) acc[x] *= corr;                       \
    int64_t j = 0;                                                                            \
    for (; j + 2 <= n; j += 2) {                                                              \
      const float p0 = p[j], p1 = p[j + 1];                                                   \
      const float *v0 = v_rows[j], *v1 = v_rows[j + 1];                                       \
      _Pragma("omp simd") for (int64_t x = 0; x < d; ++x) acc[x] += p0 * v0[x] + p1 * v1[x];  \
    }                                                                                         \
    for (; j < n; ++j) {                                                                      \
      const float pj = p[j];                                                                  \
      const float* v = v_rows[j];                                                             \
      _Pragma("omp simd") for (int64_t x = 0; x < d; ++x) acc[x] += pj * v[x];                \
    }                                                                                         \
  }                                                                                           \
  [[maybe_unused]]                                                                            \
  ATTR void scores_rows_##SUFFIX(const float* q, int64_t rows, int64_t d, const float* kt,    \
                                 int64_t kts, int64_t nk, float* s, int64_t ss) {             \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      float* sr = s + r * ss;                                                                 \
      for (int64_t j = 0; j < nk; ++j) sr[j] = 0.0f;                                          \
      for (int64_t x = 0; x < d; ++x) {                                                       \
        const float qx = q[r * d + x];                                                        \
        const float* kx = kt + x * kts;                                                       \
        _Pragma("omp simd") for (int64_t j = 0; j < nk; ++j) sr[j] += qx * kx[j];             \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  ATTR void axpy_rows_##SUFFIX(float* acc, int64_t rows, int64_t d, const float* corr,       \
                               const float* p, int64_t ps, const float* const* v_rows,        \
                               int64_t n) {                                                   \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      axpy_##SUFFIX(acc + r * d, corr[r], p + r * ps, v_rows, n, d);                          \
    }                                                                                         \
  }                                                                                           \
  ATTR void transpose_##SUFFIX(const float* const* k_rows, int64_t n, int64_t d, float* kt,  \
                               int64_t kts, int64_t nk) {                                     \
    for (int64_t j = 0; j < n; ++j) {                                                         \
      for (int64_t x = 0; x < d; ++x) kt[x * kts + j] = k_rows[j][x];                         \
    }                                                                                         \
    for (int64_t x = 0; x < d; ++x) {                                                         \
      for (int64_t j = n; j < nk; ++j) kt[x * kts + j] = 0.0f;                                \
    }                                                                                         \
  }

KVATTN_TILE_LOOPS(, generic)
KVATTN_TILE_LOOPS(__attribute__((target("avx2,fma"))), avx2_loops)
#undef KVATTN_TILE_LOOPS

// The AVX2 forms for head dims that are whole 8-float vectors (64, 80, 96, 128, 256); other
// dims take the vectorised loops above.
#define KVATTN_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

// Sums of the 8 lanes of each of a[0..7], as one vector: lane j = sum of a[j]'s lanes.
KVATTN_AVX2 __m256 transpose_sums(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  // s0123 holds {0,1,2,3} sums of the low halves then of the high halves; likewise s4567.
  const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

KVATTN_AVX2 float horizontal_sum(__m256 a) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// exp_nonpositive on 8 lanes, the same steps (NaN stays NaN: max(lo, x) returns x for a NaN x;
// below -87.3, -inf included, 0).
KVATTN_AVX2 __m256 exp_nonpositive8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 xc = _mm256_max_ps(lo, x);
  const __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), e);
}

__attribute__((target("avx2,fma"))) float max_avx2(const float* s, int64_t n, float m) {
  __m256 a0 = _mm256_set1_ps(m), a1 = a0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    a0 = _mm256_max_ps(a0, _mm256_loadu_ps(s + j));
    a1 = _mm256_max_ps(a1, _mm256_loadu_ps(s + j + 8));
  }
  for (; j + 8 <= n; j += 8) a0 = _mm256_max_ps(a0, _mm256_loadu_ps(s + j));
  a0 = _mm256_max_ps(a0, a1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; j < n; ++j) r = s[j] > r ? s[j] : r;
  return r;
}

__attribute__((target("avx2,fma"))) float softmax_avx2(float* s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = horizontal_sum(sum);
  for (; j < n; ++j) {
    s[j] = exp_nonpositive(s[j] - m);
    total += s[j];
  }
  return total;
}

// Eight keys at a time, one accumulator each, q loaded once per 8 keys; the eight sums leave
// through one transposing reduction instead of eight horizontal ones.
__attribute__((target("avx2,fma"))) void scores_avx2(const float* q, const float* const* k_rows,
                                                     int64_t n, int64_t d, float* s) {
  if (d % 8 != 0) return scores_avx2_loops(q, k_rows, n, d, s);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t x = 0; x < d; x += 8) {
      const __m256 qv = _mm256_loadu_ps(q + x);
      for (int r = 0; r < 8; ++r) {
        acc[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k_rows[j + r] + x), acc[r]);
      }
    }
    _mm256_storeu_ps(s + j, transpose_sums(acc));
  }
  for (; j < n; ++j) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t x = 0; x < d; x += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + x), _mm256_loadu_ps(k_rows[j] + x), acc);
    }
    s[j] = horizontal_sum(acc);
  }
}

// acc[c .. c + 8R) over all n keys in R registers: loaded and stored once per tile.
template <int R>
KVATTN_AVX2 void axpy_columns(float* acc, float corr, const float* p,
                              const float* const* v_rows, int64_t n, int64_t c) {
  const __m256 cv = _mm256_set1_ps(corr);
  __m256 a[R];
  for (int i = 0; i < R; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + c + 8 * i), cv);
  for (int64_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* v = v_rows[j] + c;
    for (int i = 0; i < R; ++i) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * i), a[i]);
  }
  for (int i = 0; i < R; ++i) _mm256_storeu_ps(acc + c + 8 * i, a[i]);
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float* acc, float corr, const float* p,
                                                   const float* const* v_rows, int64_t n,
                                                   int64_t d) {
  if (d % 8 != 0) return axpy_avx2_loops(acc, corr, p, v_rows, n, d);
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) axpy_columns<8>(acc, corr, p, v_rows, n, c);
  switch ((d - c) / 8) {
    case 1: axpy_columns<1>(acc, corr, p, v_rows, n, c); break;
    case 2: axpy_columns<2>(acc, corr, p, v_rows, n, c); break;
    case 3: axpy_columns<3>(acc, corr, p, v_rows, n, c); break;
    case 4: axpy_columns<4>(acc, corr, p, v_rows, n, c); break;
    case 5: axpy_columns<5>(acc, corr, p, v_rows, n, c); break;
    case 6: axpy_columns<6>(acc, corr, p, v_rows, n, c); break;
    case 7: axpy_columns<7>(acc, corr, p, v_rows, n, c); break;
    default: break;
  }
}
// The row blocks' one microkernel: R rows x 16 columns (two vectors) in 2R registers,
// c[r] += sum_t a[r * as + t] * b_t[0 .. 16) for t < steps, b_t = row(t). Per step two row
// loads and R broadcasts feed 2R FMAs.
template <int R, typename Row>
KVATTN_AVX2 void rank_one_updates(const float* a, int64_t as, Row row, int64_t steps,
                                  __m256 (&c)[R][2]) {
  for (int64_t t = 0; t < steps; ++t) {
    const float* b = row(t);
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 ab = _mm256_broadcast_ss(a + r * as + t);
      c[r][0] = _mm256_fmadd_ps(ab, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(ab, b1, c[r][1]);
    }
  }
}

// Scores of R query rows against keys j .. j + 15: the steps run over head_dim, the rows over
// the transposed key tile.
template <int R>
KVATTN_AVX2 void scores_block(const float* q, int64_t d, const float* kt, int64_t kts,
                              int64_t j, float* s, int64_t ss) {
  __m256 c[R][2];
  for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  rank_one_updates<R>(q, d, [=](int64_t x) { return kt + x * kts + j; }, d, c);
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(s + r * ss + j, c[r][0]);
    _mm256_storeu_ps(s + r * ss + j + 8, c[r][1]);
  }
}

__attribute__((target("avx2,fma"))) void scores_rows_avx2(const float* q, int64_t rows,
                                                          int64_t d, const float* kt,
                                                          int64_t kts, int64_t nk, float* s,
                                                          int64_t ss) {
  int64_t r = 0;
  for (; r + 6 <= rows; r += 6) {
    for (int64_t j = 0; j < nk; j += 16) scores_block<6>(q + r * d, d, kt, kts, j, s + r * ss, ss);
  }
  const int64_t left = rows - r;
  for (int64_t j = 0; j < nk; j += 16) {
    switch (left) {
      case 1: scores_block<1>(q + r * d, d, kt, kts, j, s + r * ss, ss); break;
      case 2: scores_block<2>(q + r * d, d, kt, kts, j, s + r * ss, ss); break;
      case 3: scores_block<3>(q + r * d, d, kt, kts, j, s + r * ss, ss); break;
      case 4: scores_block<4>(q + r * d, d, kt, kts, j, s + r * ss, ss); break;
      case 5: scores_block<5>(q + r * d, d, kt, kts, j, s + r * ss, ss); break;
      default: break;
    }
  }
}

// Output columns c .. c + 15 of R rows: rescaled by corr, then the steps run over the keys,
// the rows over V.
template <int R>
KVATTN_AVX2 void axpy_block(float* acc, int64_t d, const float* corr, const float* p,
                            int64_t ps, const float* const* v_rows, int64_t n, int64_t c) {
  __m256 a[R][2];
  for (int r = 0; r < R; ++r) {
    const __m256 cr = _mm256_set1_ps(corr[r]);
    a[r][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * d + c), cr);
    a[r][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * d + c + 8), cr);
  }
  rank_one_updates<R>(p, ps, [=](int64_t j) { return v_rows[j] + c; }, n, a);
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(acc + r * d + c, a[r][0]);
    _mm256_storeu_ps(acc + r * d + c + 8, a[r][1]);
  }
}

__attribute__((target("avx2,fma"))) void axpy_rows_avx2(float* acc, int64_t rows, int64_t d,
                                                        const float* corr, const float* p,
                                                        int64_t ps,
                                                        const float* const* v_rows, int64_t n) {
  if (d % 16 != 0) return axpy_rows_avx2_loops(acc, rows, d, corr, p, ps, v_rows, n);
  int64_t r = 0;
  for (; r + 6 <= rows; r += 6) {
    for (int64_t c = 0; c < d; c += 16) {
      axpy_block<6>(acc + r * d, d, corr + r, p + r * ps, ps, v_rows, n, c);
    }
  }
  const int64_t left = rows - r;
  float* ar = acc + r * d;
  const float* cr = corr + r;
  const float* pr = p + r * ps;
  for (int64_t c = 0; c < d; c += 16) {
    switch (left) {
      case 1: axpy_block<1>(ar, d, cr, pr, ps, v_rows, n, c); break;
      case 2: axpy_block<2>(ar, d, cr, pr, ps, v_rows, n, c); break;
      case 3: axpy_block<3>(ar, d, cr, pr, ps, v_rows, n, c); break;
      case 4: axpy_block<4>(ar, d, cr, pr, ps, v_rows, n, c); break;
      case 5: axpy_block<5>(ar, d, cr, pr, ps, v_rows, n, c); break;
      default: break;
    }
  }
}
// 8 x 8 blocks through registers (unpack, shuffle, lane swap); keys past the last whole
// block of 8, and head dims that are not whole vectors, go element by element.
__attribute__((target("avx2,fma"))) void transpose_avx2(const float* const* k_rows, int64_t n,
                                                        int64_t d, float* kt, int64_t kts,
                                                        int64_t nk) {
  if (d % 8 != 0) return transpose_avx2_loops(k_rows, n, d, kt, kts, nk);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int64_t x = 0; x < d; x += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(k_rows[j + i] + x);
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      // Column c of the block (element x + c of the 8 keys) is u_c's low half beside u_{c+4}'s
      // low half for c < 4, their high halves for c >= 4.
      const __m256 lo[4] = {u0, u1, u2, u3}, hi[4] = {u4, u5, u6, u7};
      for (int c = 0; c < 4; ++c) {
        _mm256_storeu_ps(kt + (x + c) * kts + j, _mm256_permute2f128_ps(lo[c], hi[c], 0x20));
        _mm256_storeu_ps(kt + (x + c + 4) * kts + j, _mm256_permute2f128_ps(lo[c], hi[c], 0x31));
      }
    }
  }
  for (; j < n; ++j) {
    for (int64_t x = 0; x < d; ++x) kt[x * kts + j] = k_rows[j][x];
  }
  for (int64_t x = 0; x < d; ++x) {
    for (int64_t t = n; t < nk; ++t) kt[x * kts + t] = 0.0f;
  }
}
#undef KVATTN_AVX2

const TileMath kGeneric{scores_generic,      max_generic,       softmax_generic,
                        axpy_generic,        scores_rows_generic, axpy_rows_generic,
                        transpose_generic,   "generic"};
const TileMath kAvx2{scores_avx2,    max_avx2,         softmax_avx2,   axpy_avx2,
                     scores_rows_avx2, axpy_rows_avx2, transpose_avx2, "avx2"};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace

const TileMath& tile_math_generic() { return kGeneric; }

const TileMath* tile_math_avx2() {
  static const bool ok = cpu_has_avx2();
  return ok ? &kAvx2 : nullptr;
}

const TileMath& tile_math() {
  static const TileMath& best = tile_math_avx512() != nullptr ? *tile_math_avx512()
                                : tile_math_avx2() != nullptr  ? kAvx2
                                                               : kGeneric;
  return best;
}

}  // namespace kvattn::cpu
