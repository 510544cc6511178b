// Internal: one model's fp8 KV-cache scales and their calibration state. Scales are float32
// [num_layers, num_kv_heads] for K and for V (1.0 until set), bound by each layer's Attention
// as views of row `layer`, so set() changes what the next store/attention uses without
// rebinding. While tracking, record() keeps the largest |k| and |v| per (layer, KV head).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn::cpu_model {

class KvScales {
 public:
  KvScales(int64_t num_layers, int64_t num_kv_heads);

  TensorView k_scale(int64_t layer) const { return row(k_, layer); }
  TensorView v_scale(int64_t layer) const { return row(v_, layer); }

  // [num_layers * num_kv_heads] each, every value finite and > 0 (throws naming the first bad
  // entry; nothing changes then).
  void set(std::span<const float> k, std::span<const float> v);

  void track(bool on);  // on: clears the maxima
  bool tracking() const { return tracking_; }
  // Keys/values of one layer: `tokens` rows of num_kv_heads * head_dim floats, `stride` apart.
  void record(int64_t layer, const float* k, const float* v, int64_t tokens, int64_t stride,
              int64_t head_dim);
  void amax(std::span<float> k, std::span<float> v) const;

 private:
  TensorView row(const Tensor& t, int64_t layer) const;

  int64_t num_layers_, num_kv_heads_;
  Tensor k_, v_;
  std::vector<float> k_amax_, v_amax_;
  bool tracking_ = false;
};

// amax / 448 (kE4M3Max) per entry, so the largest value maps to the largest e4m3; 1.0 where
// amax is 0 or not finite (a head that saw nothing keeps the default).
std::vector<float> scales_from_amax(std::span<const float> amax);

}  // namespace kvattn::cpu_model
