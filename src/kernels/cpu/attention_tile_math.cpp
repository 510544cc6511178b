#include "kernels/cpu/attention_tile_math.h"

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
  }

KVATTN_TILE_LOOPS(, generic)
KVATTN_TILE_LOOPS(__attribute__((target("avx2,fma"))), avx2)
#undef KVATTN_TILE_LOOPS

const TileMath kGeneric{scores_generic, softmax_generic, axpy_generic, "generic"};
const TileMath kAvx2{scores_avx2, softmax_avx2, axpy_avx2, "avx2"};

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
  static const TileMath& best = tile_math_avx2() != nullptr ? kAvx2 : kGeneric;
  return best;
}

}  // namespace kvattn::cpu
