// Internal: y = x W^T on the GPU through cuBLASLt (bf16 operands, float32 accumulation, bf16
// output), with the matmul descriptors and the heuristic's algorithm cached per shape so a
// step pays no planning after the first time it meets a shape.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "kvattn/core/tensor.h"

namespace kvattn::cuda_model {

class Gemm {
 public:
  explicit Gemm(int device);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[r, 0:n] = x[r, 0:k] w^T for r < rows. w is [n, k] row-major; ldx/ldy are row strides in
  // elements. All bf16 on this device.
  void run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
           void* y, int64_t ldy, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // rows, n, k, ldx, ldy
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
