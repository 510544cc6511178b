// Internal: a linear layer's weight [out, in] on the host in one of the WeightFormats, and
// y = x W^T over it with the OpenMP thread pool.
//
// Decode is bound by weight bandwidth, so compact storage cuts its time. Steps with few rows
// (decode) use an AVX2 kernel that streams the weight once for all rows, converting to float32
// in registers; larger steps (prefill) convert panels of the weight to float32 and run
// single-threaded OpenBLAS sgemm on them, one panel per thread at a time.
// kQ8 layout: int8 [out, in] plus float32 scales [out, in / 32]; w = q * scale of its block of
// 32 along `in` (symmetric, q in [-127, 127]). It needs in % 32 == 0; otherwise kF16 is used. Every thread pool is OpenMP's: OpenBLAS is set to one
// thread, so no second pool spins against it on a small machine.
// kGguf: the GGUF file's own blocks, read in place from the mapping (no copy). Steps of up
// to kStreamingMaxRows rows quantize x to int8 and run qdot's kernels over output rows, one
// slice per thread; larger steps dequantize panels into per-thread scratch for sgemm.
// Fused matrices (QKV, gate/up) are kept as row segments, one per source tensor, each with
// its own type (Q4_K_M files mix Q4_K and Q6_K).
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/core/tensor.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"

namespace kvattn::cpu_model {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // From a float32 [out, in] tensor, converted to `format`. A float32 source is kept as is
  // (shared, not copied).
  WeightMatrix(const Tensor& f32, WeightFormat format);
  // The named [rows_i, in] matrices of `w`, stacked by rows, taken out of w.tensors or
  // w.quantized. With kGguf and every part quantized in a type qdot computes on, the parts
  // stay in their blocks; otherwise they are dequantized and stored as `format` (kGguf: kQ8).
  WeightMatrix(ModelWeights& w, const std::vector<std::string>& names, WeightFormat format);

  static constexpr int64_t kQ8Block = 32;

  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  WeightFormat format() const { return format_; }

  // y[r, 0:out] = x[r, 0:in] W^T + beta * y[r, 0:out] for r < rows; ldx/ldy are row strides.
  void apply(const float* x, int64_t ldx, int64_t rows, float* y, int64_t ldy,
             float beta = 0.0f) const;

  // Row `i` of W as float32 (embedding lookup).
  void row(int64_t i, float* out) const;

  // Bytes this matrix holds itself (a kGguf matrix's blocks live in the file mapping: 0).
  int64_t owned_bytes() const {
    return (data_.defined() ? data_.nbytes() : 0) + (scales_.defined() ? scales_.nbytes() : 0);
  }
  // Bytes of the mapped blocks a kGguf matrix reads.
  int64_t mapped_bytes() const;

  // One run of rows stored in a GGUF block type (kGguf).
  struct Segment {
    GgmlType type;
    int64_t row0, rows, row_bytes;
    const uint8_t* data;
  };

 private:
  void apply_gguf(const float* x, int64_t ldx, int64_t rows, float* y, int64_t ldy,
                  float beta) const;

  std::vector<Segment> segments_;                   // kGguf only
  std::vector<std::shared_ptr<const void>> owners_;  // their mappings
  bool want32_ = false, want256_ = false;           // activation forms the segments need
  Tensor data_;
  Tensor scales_;  // kQ8 only
  WeightFormat format_ = WeightFormat::kF32;
  int64_t out_ = 0, in_ = 0;
};

// Rows up to which apply() uses the streaming kernel rather than panels + sgemm.
inline constexpr int64_t kStreamingMaxRows = 4;

}  // namespace kvattn::cpu_model
