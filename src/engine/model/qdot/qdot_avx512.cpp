// AVX-512 (F, BW, VL; VNNI where the CPU has it) kernels for the 32-element block types:
// two blocks per 512-bit vector, lanes 0..7 the even block and 8..15 the odd one, exactly
// the accumulator layout of qdot.h's fixed order. VNNI turns maddubs + madd into one
// vpdpbusd. Q4_K, Q5_K and Q6_K: two 32-element chunks per vector (qdot_avx512.inc, "K
// super-blocks"; vs AVX2, one thread: bench/qdot_k_bench, docs/notes/cpu-quantized.md);
// Q2_K and Q3_K take the AVX2 kernels (null entries here).
#include <immintrin.h>

#include <limits>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -O3 then
// reports as uninitialized (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "engine/model/qdot/qdot_impl.h"

namespace kvattn::qdot::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace plain {
constexpr bool kVnni = false;
#include "engine/model/qdot/qdot_avx512.inc"
}  // namespace plain
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
namespace vnni {
constexpr bool kVnni = true;
#include "engine/model/qdot/qdot_avx512.inc"
}  // namespace vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// Eight elements of quantize_row_32's arithmetic in float64 lanes: the same IEEE divisions,
// products and differences in the same order, round-to-nearest-even as nearbyint, so the same
// int8 levels. Returns 16384 q + 128 r + t per lane.
__m256i quantize8(const float* x, __m512d step, int8_t* q, int8_t* r, int8_t* t) {
  const __m512d lo = _mm512_set1_pd(-127.0), hi = _mm512_set1_pd(127.0);
  auto level = [&](__m512d v) {
    v = _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_min_pd(_mm512_max_pd(v, lo), hi);
  };
  auto store = [](int8_t* p, __m512d v) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_cvtepi32_epi8(_mm512_cvtpd_epi32(v)));
  };
  const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x));
  const __m512d qd = level(_mm512_div_pd(v, step));
  const __m512d rem = _mm512_sub_pd(v, _mm512_mul_pd(qd, step));
  const __m512d rd = level(_mm512_div_pd(_mm512_mul_pd(rem, _mm512_set1_pd(128.0)), step));
  const __m512d rest =
      _mm512_sub_pd(rem, _mm512_div_pd(_mm512_mul_pd(rd, step), _mm512_set1_pd(128.0)));
  const __m512d td = level(_mm512_div_pd(_mm512_mul_pd(rest, _mm512_set1_pd(16384.0)), step));
  store(q, qd);
  store(r, rd);
  store(t, td);
  const __m256i qi = _mm512_cvtpd_epi32(qd), ri = _mm512_cvtpd_epi32(rd);
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(qi, 14), _mm256_slli_epi32(ri, 7)),
                          _mm512_cvtpd_epi32(td));
}
#pragma GCC pop_options

}  // namespace

// Blocks with a NaN/Inf, all zeros, or a subnormal step take the portable code (their rules
// live there once); the others run quantize8 four times.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
void quantize_row_32_avx512(const float* x, int64_t n, int8_t* q, int8_t* r, int8_t* t,
                            float* d, float* s) {
  const __m512 sign = _mm512_set1_ps(-0.0f), big = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    const __m512 a0 = _mm512_andnot_ps(sign, _mm512_loadu_ps(xb));
    const __m512 a1 = _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16));
    const bool finite = (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) &
                         _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xFFFF;
    const float db = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / 127.0f;
    if (!finite || !(db >= std::numeric_limits<float>::min())) {
      quantize_row_32(xb, 32, q + b * 32, r + b * 32, t + b * 32, d + b, s + b);
      continue;
    }
    d[b] = db;
    const __m512d step = _mm512_set1_pd(db);
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 32; i += 8) {
      const int64_t o = b * 32 + i;
      sum = _mm256_add_epi32(sum, quantize8(xb + i, step, q + o, r + o, t + o));
    }
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    s[b] = (db * 0x1p-14f) * static_cast<float>(_mm_cvtsi128_si32(h));
  }
}

const Table& avx512_table(bool use_vnni) {
  // Q2_K / Q3_K: null, the AVX2 kernels
  static const Table plain_table{
      {plain::run<kQ4_0>, plain::run<kQ4_1>, plain::run<kQ8_0>, nullptr, nullptr,
       plain::run256<kQ4_K>, plain::run256<kQ5_K>, plain::run256<kQ6_K>},
      {plain::rows32<kQ4_0>, plain::rows32<kQ4_1>, plain::rows32<kQ8_0>}};
  static const Table vnni_table{
      {vnni::run<kQ4_0>, vnni::run<kQ4_1>, vnni::run<kQ8_0>, nullptr, nullptr,
       vnni::run256<kQ4_K>, vnni::run256<kQ5_K>, vnni::run256<kQ6_K>},
      {vnni::rows32<kQ4_0>, vnni::rows32<kQ4_1>, vnni::rows32<kQ8_0>}};
  return use_vnni ? vnni_table : plain_table;
}

}  // namespace kvattn::qdot::detail
