// Internal: a linear layer's weight [out, in] on the host, stored as float32, float16 or
// bfloat16, and y = x W^T over it with the OpenMP thread pool.
//
// Decode is bound by weight bandwidth, so 16-bit storage halves its time. Steps with few rows
// (decode) use an AVX2/F16C kernel that streams the weight once for all rows; larger steps
// (prefill) convert panels of the weight to float32 and run single-threaded OpenBLAS sgemm on
// them, one panel per thread at a time. Every thread pool is OpenMP's: OpenBLAS is set to one
// thread, so no second pool spins against it on a small machine.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn::cpu_model {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // From a float32 [out, in] tensor, converted to `storage` (kF32, kF16 or kBF16). A float32
  // source is kept as is (shared, not copied).
  WeightMatrix(const Tensor& f32, DType storage);

  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  DType dtype() const { return data_.dtype(); }

  // y[r, 0:out] = x[r, 0:in] W^T + beta * y[r, 0:out] for r < rows; ldx/ldy are row strides.
  void apply(const float* x, int64_t ldx, int64_t rows, float* y, int64_t ldy,
             float beta = 0.0f) const;

  // Row `i` of W as float32 (embedding lookup).
  void row(int64_t i, float* out) const;

 private:
  Tensor data_;
  int64_t out_ = 0, in_ = 0;
};

// Rows up to which apply() uses the streaming kernel rather than panels + sgemm.
inline constexpr int64_t kStreamingMaxRows = 4;

}  // namespace kvattn::cpu_model
