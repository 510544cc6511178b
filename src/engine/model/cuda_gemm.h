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

#include "engine/model/cuda_gemv.h"
#include "engine/model/cuda_launch.h"
#include "kvattn/core/tensor.h"

namespace kvattn::cuda_model {

class Gemm {
 public:
  explicit Gemm(int device);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[r, 0:n] = x[r, 0:k] w^T for r < rows. w is [n, k] row-major; ldx/ldy are row strides in
  // elements. All bf16 on this device. rows <= 8 go to the bandwidth-bound Gemv kernel where
  // it applies and the mode picks it (see cuda_gemv.h; KVATTN_GEMV), the rest to cuBLASLt.
  // on.pdl reaches the Gemv kernel only; cuBLASLt launches as it does (cuda_launch.h).
  void run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
           void* y, int64_t ldy, Launch on);

  // Which small-rows cases go to the Gemv kernel (tests, benchmarks); starts as
  // Gemv::env_mode(). use_gemv(true) is kAll, use_gemv(false) kOff.
  void set_gemv_mode(Gemv::Mode mode) { gemv_mode_ = mode; }
  void use_gemv(bool on) { gemv_mode_ = on ? Gemv::Mode::kAll : Gemv::Mode::kOff; }
  Gemv::Mode gemv_mode() const { return gemv_mode_; }
  // The GEMV itself: its fused entries (norm prologue, SiLU epilogue) for the decode path,
  // used by the model whatever gemv_mode() says (KVATTN_FUSED_GEMV; cuda_model.cpp).
  const Gemv& gemv() const { return gemv_; }
  Gemv& gemv() { return gemv_; }

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
  Gemv gemv_;
  Gemv::Mode gemv_mode_ = Gemv::env_mode();
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
