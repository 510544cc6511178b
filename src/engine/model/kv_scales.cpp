#include "engine/model/kv_scales.h"

#include <algorithm>
#include <cmath>

#include "kvattn/core/fp8.h"

namespace kvattn::cpu_model {

KvScales::KvScales(int64_t num_layers, int64_t num_kv_heads)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      k_(Tensor::empty({num_layers, num_kv_heads}, DType::kF32)),
      v_(Tensor::empty({num_layers, num_kv_heads}, DType::kF32)),
      k_amax_(num_layers * num_kv_heads, 0.0f),
      v_amax_(num_layers * num_kv_heads, 0.0f) {
  std::fill_n(k_.ptr<float>(), k_.numel(), 1.0f);
  std::fill_n(v_.ptr<float>(), v_.numel(), 1.0f);
}

TensorView KvScales::row(const Tensor& t, int64_t layer) const {
  return TensorView(t.ptr<float>() + layer * num_kv_heads_, DType::kF32, Device::cpu(),
                    {num_kv_heads_});
}

void KvScales::set(std::span<const float> k, std::span<const float> v) {
  const auto n = static_cast<size_t>(num_layers_ * num_kv_heads_);
  KVATTN_CHECK(k.size() == n && v.size() == n, "Model::set_kv_scales: k_scale and v_scale must ",
               "have num_layers * num_kv_heads = ", n, " entries but have ", k.size(), " and ",
               v.size());
  for (size_t i = 0; i < n; ++i) {
    KVATTN_CHECK(std::isfinite(k[i]) && k[i] > 0.0f, "Model::set_kv_scales: k_scale[", i,
                 "] (layer ", i / num_kv_heads_, ", KV head ", i % num_kv_heads_,
                 ") must be finite and > 0 but is ", k[i]);
    KVATTN_CHECK(std::isfinite(v[i]) && v[i] > 0.0f, "Model::set_kv_scales: v_scale[", i,
                 "] (layer ", i / num_kv_heads_, ", KV head ", i % num_kv_heads_,
                 ") must be finite and > 0 but is ", v[i]);
  }
  std::copy(k.begin(), k.end(), k_.ptr<float>());
  std::copy(v.begin(), v.end(), v_.ptr<float>());
}

void KvScales::track(bool on) {
  tracking_ = on;
  if (on) {
    std::fill(k_amax_.begin(), k_amax_.end(), 0.0f);
    std::fill(v_amax_.begin(), v_amax_.end(), 0.0f);
  }
}

void KvScales::record(int64_t layer, const float* k, const float* v, int64_t tokens,
                      int64_t stride, int64_t head_dim) {
  for (int64_t h = 0; h < num_kv_heads_; ++h) {
    float& ka = k_amax_[layer * num_kv_heads_ + h];
    float& va = v_amax_[layer * num_kv_heads_ + h];
    for (int64_t t = 0; t < tokens; ++t) {
      const float* kr = k + t * stride + h * head_dim;
      const float* vr = v + t * stride + h * head_dim;
      for (int64_t x = 0; x < head_dim; ++x) {
        ka = std::fmax(ka, std::fabs(kr[x]));  // fmax ignores NaN
        va = std::fmax(va, std::fabs(vr[x]));
      }
    }
  }
}

void KvScales::amax(std::span<float> k, std::span<float> v) const {
  KVATTN_CHECK(k.size() == k_amax_.size() && v.size() == v_amax_.size(),
               "Model::kv_amax: k_amax and v_amax must have ", k_amax_.size(),
               " entries but have ", k.size(), " and ", v.size());
  std::copy(k_amax_.begin(), k_amax_.end(), k.begin());
  std::copy(v_amax_.begin(), v_amax_.end(), v.begin());
}

std::vector<float> scales_from_amax(std::span<const float> amax) {
  std::vector<float> s(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) {
    const float a = amax[i];
    s[i] = std::isfinite(a) && a > 0.0f ? a / kE4M3Max : 1.0f;
    if (!(s[i] > 0.0f)) s[i] = 1.0f;  // an amax below 448 * FLT_TRUE_MIN underflows
  }
  return s;
}

}  // namespace kvattn::cpu_model
