#include "engine/model/cpu_ops.h"

#include <cmath>

namespace kvattn::cpu_model {
namespace {

// Elements from which a loop over rows is shared by the team (omp_set_num_threads: the CPU
// model's tuner). Rows are independent, so every team computes the same floats; below this a
// parallel region's cost exceeds the work (decode-sized steps).
constexpr int64_t kParallelElems = int64_t{1} << 15;

}  // namespace

void rms_norm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ldo) {
#pragma omp parallel for schedule(static) if (rows * dim >= kParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* o = out + r * ldo;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void rope_tables(std::span<const int32_t> positions, std::span<const float> inv_freq,
                 float scale, float* cos_out, float* sin_out) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  const auto tokens = static_cast<int64_t>(positions.size());
#pragma omp parallel for schedule(static) if (tokens * half * 16 >= kParallelElems)
  for (int64_t t = 0; t < tokens; ++t) {
    const auto pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_out[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
      sin_out[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
    }
  }
}

void apply_rope(float* x, int64_t ld, int64_t tokens, int64_t heads, int64_t head_dim,
                int64_t rotary_dim, ModelConfig::RopeStyle style, const float* cos_t,
                const float* sin_t) {
  const int64_t half = rotary_dim / 2;  // dims from rotary_dim on pass through
#pragma omp parallel for schedule(static) if (tokens * heads * half >= kParallelElems)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + t * ld + h * head_dim;
      if (style == ModelConfig::RopeStyle::kRotateHalf) {
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

void add_bias(float* x, int64_t ld, int64_t rows, const float* bias) {
  const int64_t dim = ld;
#pragma omp parallel for schedule(static) if (rows * dim >= kParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) xr[i] += bias[i];
  }
}

void silu_mul(const float* gate_up, int64_t rows, int64_t inter, float* out) {
#pragma omp parallel for schedule(static) if (rows * inter >= kParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void gelu_tanh_mul(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  // PyTorch's GeluType::Tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  constexpr float kKappa = 0.044715f;
#pragma omp parallel for schedule(static) if (rows * inter >= kParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    for (int64_t i = 0; i < inter; ++i) {
      const float x = g[i];
      const float inner = kBeta * (x + kKappa * (x * x * x));
      o[i] = 0.5f * x * (1.0f + std::tanh(inner)) * u[i];
    }
  }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

}  // namespace kvattn::cpu_model
