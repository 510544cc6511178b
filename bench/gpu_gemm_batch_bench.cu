// Decode-batch GEMM benchmark (issue 20): y[M, N] = x[M, K] W[N, K]^T in bf16 for the
// Qwen3-0.6B projections at the row counts of a continuous-batching decode step (M = 16-256),
// through cuBLASLt as cuda_model::Gemm calls it (its heuristic's first algorithm) and through
// every other algorithm the heuristic offers (up to 16), and its first with split-K 2 / 4 / 8:
// is the first one the fastest, and how far from the weight-bandwidth floor are they?
// (Session 33, H100: within 0-7% of the best; ~0.82 ms a step at 128 rows against ~0.40 ms of
// weight bytes at the copy rate; nano-vllm's steps run at ~148 rows.)
//
// Timing as gpu_gemv_bench: a CUDA graph of --iters back-to-back calls, each reading another
// copy of W (copies spanning 4x the L2: weights come from HBM, as in a step where every layer's
// weights are read once), min of 5 replays; GB/s counts the weight bytes once, "of copy"
// divides by a same-run 1 GB device-to-device copy counted as read + write. Outputs of every
// algorithm are compared with the first's (max |difference|).
//   gpu_gemm_batch_bench [--iters N] [--rows 16,64,...]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "kvattn/core/device.h"

#define BENCH_LT(expr)                                                                     \
  do {                                                                                     \
    const cublasStatus_t s_ = (expr);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr,            \
                   static_cast<int>(s_));                                                  \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

// The descriptors of cuda_model::Gemm::plan (row-major y = x w^T as column-major y^T = w^T x^T).
struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Desc(int64_t rows, int64_t n, int64_t k) {
    BENCH_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BENCH_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    BENCH_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    BENCH_LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    BENCH_LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, rows, k));
    BENCH_LT(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, rows, n));
  }
  ~Desc() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
  }
};

std::vector<int> parse_rows(const char* s) {
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 100;
  std::vector<int> rows = {16, 64, 128, 160, 256};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) rows = parse_rows(argv[++i]);
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  const BenchDevice dev = open_bench_device();
  const cudaDeviceProp& prop = dev.prop;
  cudaStream_t st = dev.stream;
  const double copy_gbps = dev.copy_gbps;

  cublasLtHandle_t lt = nullptr;
  BENCH_LT(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t{32} << 20;  // cuda_model::Gemm's workspace
  void* ws = nullptr;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));

  const auto& shapes = kQwen3Projections;
  const int max_rows = *std::max_element(rows.begin(), rows.end());
  std::vector<double> first_us(rows.size(), 0.0), best_us(rows.size(), 0.0);
  std::printf("\n| shape | M | algos | first us | of copy | best us | of copy | best is # | "
              "first / best | first split-K 2 / 4 / 8 us | max |diff| |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Projection& s : shapes) {
    const size_t wbytes = static_cast<size_t>(s.n * s.k) * 2;
    const int copies = static_cast<int>(
        std::max<size_t>(2, (4 * static_cast<size_t>(prop.l2CacheSize) + wbytes - 1) / wbytes));
    __nv_bfloat16 *w = nullptr, *x = nullptr, *y = nullptr, *y0 = nullptr;
    BENCH_CUDA(cudaMalloc(&w, wbytes * copies));
    BENCH_CUDA(cudaMalloc(&x, size_t{2} * max_rows * s.k));
    BENCH_CUDA(cudaMalloc(&y, size_t{2} * max_rows * s.n));
    BENCH_CUDA(cudaMalloc(&y0, size_t{2} * max_rows * s.n));
    fill_random_bf16<<<1024, 256, 0, st>>>(w, static_cast<int64_t>(wbytes / 2) * copies, 7u);
    fill_random_bf16<<<64, 256, 0, st>>>(x, int64_t{max_rows} * s.k, 99u);
    BENCH_CUDA(cudaGetLastError());
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      const int m = rows[ri];
      Desc d(m, s.n, s.k);
      cublasLtMatmulPreference_t pref = nullptr;
      BENCH_LT(cublasLtMatmulPreferenceCreate(&pref));
      const uint64_t wsb = ws_bytes;
      BENCH_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &wsb, sizeof(wsb)));
      cublasLtMatmulHeuristicResult_t res[16 + 3] = {};
      int split_of[16 + 3] = {};
      int found = 0;
      BENCH_LT(cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.a, d.b, d.c, d.c, pref, 16, res, &found));
      cublasLtMatmulPreferenceDestroy(pref);
      // Beside the heuristic's algorithms: its first with split-K 2, 4 and 8 (the N = 1024
      // projections fill few SMs at these M), where cublasLtMatmulAlgoCheck accepts them.
      int candidates = found;
      for (int split : {2, 4, 8}) {
        if (candidates >= 16 + 3) break;
        cublasLtMatmulHeuristicResult_t r = res[0];
        const int32_t sk = split;
        if (cublasLtMatmulAlgoConfigSetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                                 sizeof(sk)) != CUBLAS_STATUS_SUCCESS)
          continue;
        cublasLtMatmulHeuristicResult_t checked{};
        if (cublasLtMatmulAlgoCheck(lt, d.op, d.a, d.b, d.c, d.c, &r.algo, &checked) !=
                CUBLAS_STATUS_SUCCESS ||
            checked.workspaceSize > ws_bytes)
          continue;
        split_of[candidates] = split;
        res[candidates++] = r;
      }
      const float alpha = 1.0f, beta = 0.0f;
      double first = 0.0, best = 1e30;
      int best_i = -1;
      double split_us[9] = {};
      double maxd = 0.0;
      const size_t outs = static_cast<size_t>(m) * s.n;
      std::vector<uint16_t> h0(outs), h(outs);
      for (int a = 0; a < candidates; ++a) {
        const auto call = [&](const __nv_bfloat16* wi, __nv_bfloat16* yo) {
          return cublasLtMatmul(lt, d.op, &alpha, wi, d.a, x, d.b, &beta, yo, d.c, yo, d.c,
                                &res[a].algo, ws, ws_bytes, st);
        };
        if (call(w, a == 0 ? y0 : y) != CUBLAS_STATUS_SUCCESS) continue;
        BENCH_CUDA(cudaStreamSynchronize(st));
        BENCH_CUDA(cudaMemcpy((a == 0 ? h0 : h).data(), a == 0 ? y0 : y, outs * 2,
                              cudaMemcpyDeviceToHost));
        if (a > 0) {
          for (size_t i = 0; i < outs; ++i)
            maxd = std::max(maxd, static_cast<double>(std::fabs(bf16_bits_to_float(h0[i]) -
                                                                bf16_bits_to_float(h[i]))));
        }
        const double us = time_graph(st, iters, [&](int i, cudaStream_t) {
          BENCH_LT(call(w + (i % copies) * (wbytes / 2), y));
        });
        if (a == 0) first = us;
        if (split_of[a] > 0) split_us[split_of[a]] = us;
        if (us < best) best = us, best_i = a;
      }
      if (best_i < 0 || first == 0.0) {  // cuBLASLt ran none of them (or not its first)
        std::printf("| %s | %d | %d | no algorithm ran |\n", s.name, m, found);
        continue;
      }
      const double wgt = s.per_step;
      first_us[ri] += wgt * first;
      best_us[ri] += wgt * best;
      const auto frac = [&](double us) { return 100.0 * wbytes / (us * 1e-6) / 1e9 / copy_gbps; };
      std::printf("| %s | %d | %d | %.2f | %.0f%% | %.2f | %.0f%% | %s%d | %.2fx | %.2f / %.2f / "
                  "%.2f | %.3g |\n", s.name, m, found, first, frac(first), best, frac(best),
                  split_of[best_i] > 0 ? "0 split " : "",
                  split_of[best_i] > 0 ? split_of[best_i] : best_i,
                  first / best, split_us[2], split_us[4], split_us[8], maxd);
    }
    BENCH_CUDA(cudaFree(w));
    BENCH_CUDA(cudaFree(x));
    BENCH_CUDA(cudaFree(y));
    BENCH_CUDA(cudaFree(y0));
  }
  double token_bytes = 0.0;
  for (const Projection& s : shapes)
    token_bytes += s.per_step * s.n * s.k * 2;
  std::printf("\nper decode step (28 x (qkv + o_proj + gate_up + down) + lm_head, %.3f GB of "
              "weights; floor at the copy rate %.1f us):\n| M | first us | best us |\n|---|---|---|\n",
              token_bytes / 1e9, token_bytes / copy_gbps / 1e3);
  for (size_t ri = 0; ri < rows.size(); ++ri)
    std::printf("| %d | %.1f | %.1f |\n", rows[ri], first_us[ri], best_us[ri]);
  BENCH_CUDA(cudaFree(ws));
  cublasLtDestroy(lt);
  return 0;
}
