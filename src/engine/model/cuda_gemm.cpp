#ifdef KVATTN_WITH_CUDA

#include "engine/model/cuda_gemm.h"

#include "kernels/cuda/cuda_check.h"

#define CUBLASLT_CHECK(expr)                                                             \
  do {                                                                                   \
    const cublasStatus_t kvattn_st_ = (expr);                                            \
    KVATTN_CHECK(kvattn_st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed with status ",     \
                 static_cast<int>(kvattn_st_));                                          \
  } while (0)

namespace kvattn::cuda_model {

namespace {
constexpr int64_t kWorkspaceBytes = 32 << 20;
}

Gemm::Gemm(int device) : gemv_(device) {
  cuda::DeviceGuard guard(device);
  CUBLASLT_CHECK(cublasLtCreate(&handle_));
  workspace_ = Tensor::empty({kWorkspaceBytes}, DType::kU8, Device::cuda(device));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// Row-major y[rows, n] = x[rows, k] w[n, k]^T is column-major y^T[n, rows] = w^T x^T with w
// read as a column-major [k, n] matrix transposed and x as column-major [k, rows].
const Gemm::Plan& Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [rows, n, k, ldx, ldy] = key;
  Plan p;
  CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, rows, ldx));
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, n, rows, ldy));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  KVATTN_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
               "cuda model: cuBLASLt has no algorithm for a bf16 GEMM of ", rows, " x ", n,
               " x ", k, " (status ", static_cast<int>(st), ")");
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t n, int64_t k,
               void* y, int64_t ldy, Launch on) {
  if (rows == 0) return;
  const bool gemv = gemv_mode_ == Gemv::Mode::kAll ||
                    (gemv_mode_ == Gemv::Mode::kAuto && Gemv::preferred(rows, n, k));
  if (gemv && rows <= Gemv::kMaxRows && gemv_.run(x, ldx, rows, w, n, k, y, ldy, on)) return;
  const Plan& p = plan({rows, n, k, ldx, ldy});
  const float alpha = 1.0f, beta = 0.0f;
  CUBLASLT_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                                &p.algo, workspace_.data(), kWorkspaceBytes, on.stream));
}

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
