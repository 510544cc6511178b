// Internal: the inner loops of the CPU attention backend, over one key tile at a time, with
// a generic build and an AVX2+FMA build chosen once at run time (the library itself is
// compiled for the baseline x86-64, so it runs on any machine).
//
// Contracts (n keys of the tile, d = head_dim, all float32):
//   scores:  s[j] = dot(q, k_rows[j])                          for j < n
//   max:     returns max(m, s[0], .., s[n - 1])               (exact; NaN inputs: any result)
//   softmax: p[j] = exp(s[j] - m) in place; returns sum p[j]   (m >= every s[j]; m finite)
//   axpy:    acc[x] = acc[x] * corr + sum_j p[j] * v_rows[j][x]
// and the same over a block of R query rows sharing the tile (prefill, wide GQA groups), with
// the keys transposed so the dot products vectorise over keys:
//   scores_rows: s[r * ss + j] = dot(q[r * d ..], kt[.. * kts + j])  for r < R, j < nk
//                (kt: d rows of kts floats, key j in column j; nk a multiple of 16)
//   axpy_rows:   acc[r * d + x] = acc[r * d + x] * corr[r] + sum_j p[r * ps + j] * v_rows[j][x]
//                for r < R, j < n
//   transpose:   kt[x * kts + j] = k_rows[j][x] for j < n, 0 for n <= j < nk; x < d
// exp is a polynomial (relative error < 2e-7 on [-87, 0], exp(x) = 0 below -87.3): the
// arguments are <= 0 here, and terms below e^-87 do not change a float32 softmax sum.
#pragma once

#include <cstdint>

namespace kvattn::cpu {

struct TileMath {
  void (*scores)(const float* q, const float* const* k_rows, int64_t n, int64_t d, float* s);
  float (*max)(const float* s, int64_t n, float m);
  float (*softmax)(float* s, int64_t n, float m);
  void (*axpy)(float* acc, float corr, const float* p, const float* const* v_rows, int64_t n,
               int64_t d);
  void (*scores_rows)(const float* q, int64_t rows, int64_t d, const float* kt, int64_t kts,
                      int64_t nk, float* s, int64_t ss);
  void (*axpy_rows)(float* acc, int64_t rows, int64_t d, const float* corr, const float* p,
                    int64_t ps, const float* const* v_rows, int64_t n);
  void (*transpose)(const float* const* k_rows, int64_t n, int64_t d, float* kt, int64_t kts,
                    int64_t nk);
  const char* name;  // "avx2" or "generic"
};

// The best variant this CPU runs.
const TileMath& tile_math();
// The variants, for tests: generic, and avx2 (null when the CPU lacks AVX2/FMA).
const TileMath& tile_math_generic();
const TileMath* tile_math_avx2();
// The AVX2 table with AVX-512 row blocks, or null when the CPU lacks AVX-512F (or AVX2/FMA).
const TileMath* tile_math_avx512();

}  // namespace kvattn::cpu
