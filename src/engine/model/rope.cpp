#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>

namespace kvattn::rope {
namespace {

// HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
std::vector<float> default_inv_freq(float base, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    f[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  }
  return f;
}

// HF's _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, a
// smooth blend between.
void llama3(const RopeScaling& s, std::vector<float>& f) {
  const auto factor = static_cast<float>(s.factor);
  const auto low = static_cast<float>(s.low_freq_factor);
  const auto old_len = static_cast<float>(s.original_max_position_embeddings);
  const auto low_wavelen = static_cast<float>(static_cast<double>(old_len) / s.low_freq_factor);
  const auto high_wavelen = static_cast<float>(static_cast<double>(old_len) / s.high_freq_factor);
  const auto span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& x : f) {
    const float wavelen = static_cast<float>(2 * std::numbers::pi) / x;
    const float base = wavelen > low_wavelen ? x / factor : x;
    const float smooth = (old_len / wavelen - low) / span;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    x = medium ? (1 - smooth) * base / factor + smooth * base : base;
  }
}

// HF's _compute_yarn_parameters: interpolated (divided by factor) below the correction range,
// extrapolated (kept) above it, a linear ramp inside.
void yarn(const RopeScaling& s, float base, int64_t dim, std::span<const float> freq_factors,
          std::vector<float>& f) {
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(s.original_max_position_embeddings) /
                    (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(static_cast<double>(base)));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a singularity
  const auto factor = static_cast<float>(s.factor);
  for (size_t i = 0; i < f.size(); ++i) {
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
    float extrapolation = 1.0f / pos_freq;
    float interpolation = 1.0f / (factor * pos_freq);
    if (i < freq_factors.size()) {
      extrapolation /= freq_factors[i];
      interpolation /= freq_factors[i];
    }
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float keep = 1.0f - ramp;
    f[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
}

}  // namespace

std::vector<float> inv_freq(const ModelConfig& c, int64_t seq_len) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t dim = c.rope_dim();  // partial rotary: the rotated dims only (HF's `dim`)
  auto base = static_cast<float>(c.rope_theta);
  if (s.type == RopeScaling::Type::kDynamic && seq_len > c.max_position_embeddings) {
    // HF's _compute_dynamic_ntk_parameters (float32: seq_len arrives as a tensor).
    const float growth = static_cast<float>(s.factor) * static_cast<float>(seq_len) /
                             static_cast<float>(c.max_position_embeddings) -
                         static_cast<float>(s.factor - 1);
    base *= std::pow(growth, static_cast<float>(static_cast<double>(dim) / (dim - 2)));
  }
  std::vector<float> f = default_inv_freq(base, dim);
  for (size_t i = 0; i < c.rope_freq_factors.size() && i < f.size(); ++i) {
    f[i] /= c.rope_freq_factors[i];  // llama.cpp's rope_freqs: theta / freq_factor
  }
  switch (s.type) {
    case RopeScaling::Type::kNone:
    case RopeScaling::Type::kDynamic:
      break;
    case RopeScaling::Type::kLinear:
      for (float& x : f) x /= static_cast<float>(s.factor);
      break;
    case RopeScaling::Type::kLlama3:
      llama3(s, f);
      break;
    case RopeScaling::Type::kYarn:
      yarn(s, base, dim, c.rope_freq_factors, f);
      break;
    case RopeScaling::Type::kLongRope: {
      // HF's _compute_longrope_parameters: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)),
      // in float32 (the product first, then the reciprocal).
      const std::vector<float>& ext = s.use_long_factors ? s.long_factor : s.short_factor;
      for (size_t i = 0; i < f.size() && i < ext.size(); ++i) {
        f[i] = 1.0f / (ext[i] * std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim)));
      }
      break;
    }
  }
  return f;
}

std::vector<float> local_inv_freq(const ModelConfig& c) {
  if (c.rope_local_theta <= 0) return {};
  return default_inv_freq(static_cast<float>(c.rope_local_theta), c.rope_dim());
}

float attention_factor(const ModelConfig& c) {
  return c.rope_scaling.type == RopeScaling::Type::kYarn ||
                 c.rope_scaling.type == RopeScaling::Type::kLongRope
             ? static_cast<float>(c.rope_scaling.attention_factor)
             : 1.0f;
}

}  // namespace kvattn::rope
