// Fused decode GEMVs (engine/model/cuda_gemv.h; issue 20) against the kernels they replace,
// at Qwen3-0.6B's widths (hidden 1024; qkv n = 4096; gate_up 2 x 3072), rows M = 1, 4, 8:
//   qkv:     add_rmsnorm + GEMM(qkv)                  vs  Gemv::run_rmsnorm
//   gate_up: add_rmsnorm + GEMM(gate_up) + silu_mul   vs  Gemv::run_rmsnorm_silu
// GEMM = cuBLASLt (what the default Gemv::Mode picks at these n: today's decode path) or the
// plain GEMV. Each fused figure is given with the default split (R = 2, ks = 1 at these n) and
// the legacy one (R = 4, ks = 4), and the plain GEMV alone too, so the split and the fusion
// are told apart. Each timing is one CUDA graph of `--iters` back-to-back calls (as the decode
// graph replays them), each reading a different copy of the weights (> 4x L2 of copies, so
// from HBM); time per call = graph time / iters, min of 5 replays after a warm-up. Our kernels
// launch with PDL when --pdl and the device takes it (cuBLASLt never does). GB/s counts the
// weight bytes; "of copy" divides by a same-run 1 GB device-to-device copy (read + write).
// The summary: 28 x (qkv + gate_up) per decode token, today's path vs fused.
//   gpu_fused_gemv_bench [--iters N] [--pdl]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_gemv.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_launch.h"
#include "kvattn/core/device.h"

namespace {

namespace k = kvattn::cuda_model;

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  bool pdl = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--pdl") == 0) pdl = true;
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  pdl = pdl && k::pdl_supported(0);
  std::printf("device: %s, %d SMs, L2 %.0f MB; our kernels %s PDL\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, pdl ? "with" : "without");
  cudaStream_t st = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  double copy_gbps = 0.0;
  {
    const size_t bytes = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    BENCH_CUDA(cudaMalloc(&a, bytes));
    BENCH_CUDA(cudaMalloc(&b, bytes));
    BENCH_CUDA(cudaMemsetAsync(a, 1, bytes, st));
    const double us = time_graph(st, 4, [&](int, cudaStream_t s) {
      BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    });
    copy_gbps = 2.0 * bytes / (us * 1e-6) / 1e9;
    std::printf("copy ceiling: 1 GB D2D in %.3f ms = %.0f GB/s (read + write)\n", us / 1e3,
                copy_gbps);
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(b));
  }

  const int64_t H = 1024, qkv_n = 4096, inter = 3072;
  k::Gemm lt(0), gv(0);
  lt.use_gemv(false);
  gv.use_gemv(true);
  k::Gemv fused(0), legacy(0);
  legacy.set_split_rule(k::Gemv::SplitRule::kLegacy);
  gv.gemv().set_split_rule(k::Gemv::SplitRule::kDefault);
  const k::Launch on{st, pdl};

  __nv_bfloat16 *x = nullptr, *x2 = nullptr, *add = nullptr, *nw = nullptr, *h = nullptr,
                *y = nullptr, *gu = nullptr, *act = nullptr;
  BENCH_CUDA(cudaMalloc(&x, 8 * H * 2));
  BENCH_CUDA(cudaMalloc(&x2, 8 * H * 2));
  BENCH_CUDA(cudaMalloc(&add, 8 * H * 2));
  BENCH_CUDA(cudaMalloc(&nw, H * 2));
  BENCH_CUDA(cudaMalloc(&h, 8 * H * 2));
  BENCH_CUDA(cudaMalloc(&y, 8 * qkv_n * 2));
  BENCH_CUDA(cudaMalloc(&gu, 8 * 2 * inter * 2));
  BENCH_CUDA(cudaMalloc(&act, 8 * inter * 2));
  fill_random_bf16<<<64, 256, 0, st>>>(x, 8 * H, 1u);
  fill_random_bf16<<<64, 256, 0, st>>>(add, 8 * H, 2u);
  fill_random_bf16<<<64, 256, 0, st>>>(nw, H, 3u);

  struct Shape {
    const char* name;
    int64_t n;
    bool silu;
  };
  const Shape shapes[] = {{"qkv", qkv_n, false}, {"gate_up", 2 * inter, true}};
  const int ms[] = {1, 4, 8};
  double today[2][3] = {}, best_fused[2][3] = {};
  std::printf("\n| op | M | norm+cuBLASLt (today) us | norm+GEMV us | GEMV alone us | GEMV alone "
              "legacy us | fused us | fused legacy us | fused GB/s | of copy | fused vs today "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int si = 0; si < 2; ++si) {
    const Shape& s = shapes[si];
    const size_t wbytes = static_cast<size_t>(s.n * H) * 2;
    const int copies = static_cast<int>(
        std::max<size_t>(2, (4 * static_cast<size_t>(prop.l2CacheSize) + wbytes - 1) / wbytes));
    __nv_bfloat16* w = nullptr;
    BENCH_CUDA(cudaMalloc(&w, wbytes * copies));
    fill_random_bf16<<<1024, 256, 0, st>>>(w, static_cast<int64_t>(wbytes / 2) * copies, 7u + si);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(st));
    auto wi = [&](int i) { return w + (i % copies) * (wbytes / 2); };
    for (int mi = 0; mi < 3; ++mi) {
      const int64_t m = ms[mi];
      auto unfused = [&](k::Gemm& g) {
        return [&, m, gp = &g](int i, cudaStream_t) {
          k::add_rmsnorm(x, add, nw, 1e-6f, h, nullptr, m, H, on);
          gp->run(h, H, m, wi(i), s.n, H, s.silu ? gu : y, s.n, on);
          if (s.silu) k::silu_mul(gu, m, inter, act, on);
        };
      };
      auto gemv_alone = [&](k::Gemv& g) {
        return [&, m, gp = &g](int i, cudaStream_t) {
          gp->run(h, H, m, wi(i), s.n, H, s.silu ? gu : y, s.n, on);
        };
      };
      auto fused_call = [&](k::Gemv& g) {
        return [&, m, gp = &g](int i, cudaStream_t) {
          k::Gemv::NormInput in;
          in.x = x;
          in.add = add;
          in.weight = nw;
          in.eps = 1e-6f;
          in.x_out = x2;
          if (s.silu) {
            gp->run_rmsnorm_silu(in, m, H, wi(i), inter, act, inter, on);
          } else {
            gp->run_rmsnorm(in, m, H, wi(i), s.n, y, s.n, on);
          }
        };
      };
      const double t_lt = time_graph(st, iters, unfused(lt));
      const double t_gv = time_graph(st, iters, unfused(gv));
      const double t_alone = time_graph(st, iters, gemv_alone(fused));
      const double t_alone_legacy = time_graph(st, iters, gemv_alone(legacy));
      const double t_f = time_graph(st, iters, fused_call(fused));
      const double t_fl = time_graph(st, iters, fused_call(legacy));
      const double tf = std::min(t_f, t_fl);
      today[si][mi] = t_lt;
      best_fused[si][mi] = t_f;
      const double gbps = wbytes / (t_f * 1e-6) / 1e9;
      std::printf("| %s | %ld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f%% | %.2fx%s |\n",
                  s.name, static_cast<long>(m), t_lt, t_gv, t_alone, t_alone_legacy, t_f, t_fl,
                  gbps, 100.0 * gbps / copy_gbps, t_lt / t_f,
                  tf < t_f ? " (legacy split faster)" : "");
    }
    BENCH_CUDA(cudaFree(w));
  }
  std::printf("\nper decode token, 28 x (qkv + gate_up) with their norms and SiLU (floor at the "
              "copy rate %.1f us):\n| M | today us | fused us | saved us |\n|---|---|---|---|\n",
              28.0 * (qkv_n + 2 * inter) * H * 2 / copy_gbps / 1e3);
  for (int mi = 0; mi < 3; ++mi) {
    const double a = 28 * (today[0][mi] + today[1][mi]);
    const double b = 28 * (best_fused[0][mi] + best_fused[1][mi]);
    std::printf("| %d | %.1f | %.1f | %.1f |\n", ms[mi], a, b, a - b);
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(x2), static_cast<void*>(add),
                  static_cast<void*>(nw), static_cast<void*>(h), static_cast<void*>(y),
                  static_cast<void*>(gu), static_cast<void*>(act)})
    BENCH_CUDA(cudaFree(p));
  return 0;
}
