// The AVX-512 row-block loops (attention_tile_math.h): the same microkernel as the AVX2 form
// (attention_tile_math.cpp) on 16-float vectors, 8 rows x 32 columns in 16 of the 32
// registers. The per-row loops (decode with small groups) stay AVX2: they are bound by the
// cache's bytes, not the FMAs.
#include <immintrin.h>

#include "kernels/cpu/attention_tile_math.h"

namespace kvattn::cpu {
namespace {

#define KVATTN_AVX512 __attribute__((target("avx512f"), always_inline)) inline

// c[r][v] += sum_t a[r * as + t] * b_t[16 v .. 16 v + 16) for t < steps, b_t = row(t), V of
// the two vectors (32 columns, or 16 at a tile's edge).
template <int R, int V, typename Row>
KVATTN_AVX512 void rank_one_updates(const float* a, int64_t as, Row row, int64_t steps,
                                    __m512 (&c)[R][2]) {
  for (int64_t t = 0; t < steps; ++t) {
    const float* b = row(t);
    __m512 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 ab = _mm512_set1_ps(a[r * as + t]);
      for (int v = 0; v < V; ++v) c[r][v] = _mm512_fmadd_ps(ab, bv[v], c[r][v]);
    }
  }
}

// Scores of R rows against keys j .. j + 16 V - 1 (steps over head_dim, rows of K^T).
template <int R, int V>
KVATTN_AVX512 void scores_block(const float* q, int64_t d, const float* kt, int64_t kts,
                                int64_t j, float* s, int64_t ss) {
  __m512 c[R][2];
  for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  rank_one_updates<R, V>(q, d, [=](int64_t x) { return kt + x * kts + j; }, d, c);
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(s + r * ss + j + 16 * v, c[r][v]);
  }
}

// Output columns c0 .. c0 + 16 V - 1 of R rows: rescaled by corr, then P V over the keys.
template <int R, int V>
KVATTN_AVX512 void axpy_block(float* acc, int64_t d, const float* corr, const float* p,
                              int64_t ps, const float* const* v_rows, int64_t n, int64_t c0) {
  __m512 c[R][2];
  for (int r = 0; r < R; ++r) {
    const __m512 cr = _mm512_set1_ps(corr[r]);
    for (int v = 0; v < V; ++v) {
      c[r][v] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * d + c0 + 16 * v), cr);
    }
  }
  rank_one_updates<R, V>(p, ps, [=](int64_t j) { return v_rows[j] + c0; }, n, c);
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + r * d + c0 + 16 * v, c[r][v]);
  }
}

#define KVATTN_ROW_CASES(CALL)                                                                  \
  switch (left) {                                                                               \
    case 1: CALL(1); break;                                                                     \
    case 2: CALL(2); break;                                                                     \
    case 3: CALL(3); break;                                                                     \
    case 4: CALL(4); break;                                                                     \
    case 5: CALL(5); break;                                                                     \
    case 6: CALL(6); break;                                                                     \
    case 7: CALL(7); break;                                                                     \
    default: break;                                                                             \
  }

__attribute__((target("avx512f"))) void scores_rows_avx512(const float* q, int64_t rows,
                                                           int64_t d, const float* kt,
                                                           int64_t kts, int64_t nk, float* s,
                                                           int64_t ss) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    int64_t j = 0;
    for (; j + 32 <= nk; j += 32) scores_block<8, 2>(q + r * d, d, kt, kts, j, s + r * ss, ss);
    if (j < nk) scores_block<8, 1>(q + r * d, d, kt, kts, j, s + r * ss, ss);
  }
  const int64_t left = rows - r;
  const float* qr = q + r * d;
  float* sr = s + r * ss;
  int64_t j = 0;
  for (; j + 32 <= nk; j += 32) {
#define KVATTN_CALL(R) scores_block<R, 2>(qr, d, kt, kts, j, sr, ss)
    KVATTN_ROW_CASES(KVATTN_CALL)
#undef KVATTN_CALL
  }
  if (j < nk) {
#define KVATTN_CALL(R) scores_block<R, 1>(qr, d, kt, kts, j, sr, ss)
    KVATTN_ROW_CASES(KVATTN_CALL)
#undef KVATTN_CALL
  }
}

__attribute__((target("avx512f"))) void axpy_rows_avx512(float* acc, int64_t rows, int64_t d,
                                                         const float* corr, const float* p,
                                                         int64_t ps,
                                                         const float* const* v_rows,
                                                         int64_t n) {
  if (d % 16 != 0) return tile_math_avx2()->axpy_rows(acc, rows, d, corr, p, ps, v_rows, n);
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) {
      axpy_block<8, 2>(acc + r * d, d, corr + r, p + r * ps, ps, v_rows, n, c);
    }
    if (c < d) axpy_block<8, 1>(acc + r * d, d, corr + r, p + r * ps, ps, v_rows, n, c);
  }
  const int64_t left = rows - r;
  float* ar = acc + r * d;
  const float* cr = corr + r;
  const float* pr = p + r * ps;
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
#define KVATTN_CALL(R) axpy_block<R, 2>(ar, d, cr, pr, ps, v_rows, n, c)
    KVATTN_ROW_CASES(KVATTN_CALL)
#undef KVATTN_CALL
  }
  if (c < d) {
#define KVATTN_CALL(R) axpy_block<R, 1>(ar, d, cr, pr, ps, v_rows, n, c)
    KVATTN_ROW_CASES(KVATTN_CALL)
#undef KVATTN_CALL
  }
}
#undef KVATTN_ROW_CASES
#undef KVATTN_AVX512

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

const TileMath* tile_math_avx512() {
  static const TileMath* table = []() -> const TileMath* {
    if (tile_math_avx2() == nullptr || !cpu_has_avx512()) return nullptr;
    static TileMath t = *tile_math_avx2();
    t.scores_rows = scores_rows_avx512;
    t.axpy_rows = axpy_rows_avx512;
    t.name = "avx512";
    return &t;
  }();
  return table;
}

}  // namespace kvattn::cpu
