// Internal: y = x W^T for a few rows of x (decode: rows <= 8), bf16 operands, float32
// accumulation, bf16 output rounded once, like cuBLASLt's, but built for the shape where
// cuBLASLt is far from the memory bandwidth: every weight element is read once, with 16-byte
// non-caching loads, for all rows of x at once (x sits in shared memory). Used by Gemm::run
// when it applies; launches nothing else, allocates nothing, so it is CUDA-graph capturable.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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
  // 16-byte aligned, ldx % 8 != 0, or x's rows do not fit in shared memory.
  bool run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
           void* y, int64_t ldy, cudaStream_t stream) const;

  // False when the environment sets KVATTN_GEMV=0 (read once per process).
  static bool env_enabled();

 private:
  int sms_ = 0;
  size_t smem_optin_ = 0;   // per block, after the opt-in
  size_t smem_per_sm_ = 0;
  int regs_[kMaxRows] = {};  // registers per thread of each row count's kernel
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
