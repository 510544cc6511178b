// Internal: y = x W^T for a few rows of x (decode: rows <= 8), bf16 operands, float32
// accumulation, bf16 output rounded once, like cuBLASLt's, but built for the shape where
// cuBLASLt is far from the memory bandwidth: every weight element is read once, with 16-byte
// non-caching loads, for all rows of x at once (x sits in shared memory). Gemm::run uses it
// for the shapes where it measured faster (Mode, preferred()); launches nothing else,
// allocates nothing, so it is CUDA-graph capturable.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/cuda_launch.h"

namespace kvattn::cuda_model {

class Gemv {
 public:
  static constexpr int64_t kMaxRows = 8;

  // Reads the device's limits and raises the kernels' shared-memory limit (host calls only,
  // never during a capture).
  explicit Gemv(int device);

  // y[r, 0:n] = x[r, 0:k] w^T for r < rows; w is [n, k] row-major, ldx/ldy row strides in
  // elements, all bf16. Launches one kernel on `stream` and returns true; returns false and
  // launches nothing when the case is not supported: rows not in [1, 8], k % 8 != 0, x/w not
  // 16-byte aligned, ldx % 8 != 0, or x's rows do not fit in shared memory. With on.pdl
  // (cuda_launch.h) each CTA asks L2 for its first tile of w before it waits for the previous
  // kernel, so w must be written by no kernel still in flight before this one (weights).
  bool run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
           void* y, int64_t ldy, Launch on) const;

  // Which eligible cases Gemm sends here. kAuto: only the shapes where the H200 measurement
  // (docs/perf/NOTES.md, "GEMV for small-batch decode") found the GEMV faster than cuBLASLt,
  // see preferred(); kAll: every case run() accepts; kOff: none.
  enum class Mode { kOff, kAuto, kAll };
  // KVATTN_GEMV (read once per process): "0" kOff, "all" kAll, unset or anything else kAuto.
  static Mode env_mode();
  // kAuto's rule: a small number of output features (the K-split regime: o_proj, down_proj of
  // Qwen3-0.6B, 1024 x 2048/3072, 1.05-3.5x at M = 1..8), or a vocabulary-sized one at
  // rows <= 4 (lm_head 151936 x 1024: 1.05-1.06x; 0.76x at M = 8). The mid-sized ones (qkv
  // 4096, gate_up 6144: 0.59-0.95x) stay on cuBLASLt.
  static bool preferred(int64_t rows, int64_t n, int64_t k);

 private:
  int sms_ = 0;
  size_t smem_optin_ = 0;   // per block, after the opt-in
  size_t smem_per_sm_ = 0;
  int regs_[kMaxRows] = {};  // registers per thread of each row count's kernel
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
