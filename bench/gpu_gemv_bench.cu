// Small-rows GEMM (decode) benchmark: y[M, N] = x[M, K] W[N, K]^T in bf16 for the
// Qwen3-0.6B projections (qkv, o_proj, gate_up, down; lm_head) at M = 1, 4, 8, through
// cuda_model::Gemm with its GEMV path off (cuBLASLt) and forced on for every shape
// (engine/model/cuda_gemv.cu); the summary also adds up the default (auto) choice per shape.
//
// Each timing is one CUDA graph of `--iters` back-to-back calls (as the decode step replays
// them), each call reading a different copy of W, with enough copies that they span more than
// 4x the L2, so every call reads its weights from HBM. Time per call = graph time / iters
// (min of 5 replays after a warm-up). GB/s counts the weight bytes read once (x and y are
// < 0.1% of them); "of copy" divides by a same-run 1 GB cudaMemcpy device-to-device rate
// counted as read + write bytes (the ceiling for one stream of traffic). The summary adds
// 28 x (qkv + o_proj + gate_up + down) + lm_head: the GEMM time of one decode token.
//   gpu_gemv_bench [--iters N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "engine/model/cuda_gemm.h"
#include "kvattn/core/device.h"


int main(int argc, char** argv) {
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  const BenchDevice dev = open_bench_device();
  const cudaDeviceProp& prop = dev.prop;
  cudaStream_t st = dev.stream;
  const double copy_gbps = dev.copy_gbps;

  kvattn::cuda_model::Gemm lt(0), gv(0);
  lt.use_gemv(false);
  gv.use_gemv(true);

  const auto& shapes = kQwen3Projections;
  const int ms[] = {1, 4, 8};
  double us[std::size(kQwen3Projections)][3][2] = {};  // shape, M, impl (0 cuBLASLt, 1 GEMV)
  std::printf("\n| shape | N x K | MB | M | cuBLASLt us | GB/s | of copy | GEMV us | GB/s | of copy "
              "| speedup | max |gemv-lt| |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t si = 0; si < std::size(shapes); ++si) {
    const Projection& s = shapes[si];
    const size_t wbytes = static_cast<size_t>(s.n * s.k) * 2;
    const int copies = static_cast<int>(
        std::max<size_t>(2, (4 * static_cast<size_t>(prop.l2CacheSize) + wbytes - 1) / wbytes));
    __nv_bfloat16* w = nullptr;
    __nv_bfloat16 *x = nullptr, *y0 = nullptr, *y1 = nullptr;
    BENCH_CUDA(cudaMalloc(&w, wbytes * copies));
    BENCH_CUDA(cudaMalloc(&x, 8 * s.k * 2));
    BENCH_CUDA(cudaMalloc(&y0, 8 * s.n * 2));
    BENCH_CUDA(cudaMalloc(&y1, 8 * s.n * 2));
    fill_random_bf16<<<1024, 256, 0, st>>>(w, static_cast<int64_t>(wbytes / 2) * copies, 7u + si);
    fill_random_bf16<<<64, 256, 0, st>>>(x, 8 * s.k, 99u + si);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(st));
    for (int mi = 0; mi < 3; ++mi) {
      const int m = ms[mi];
      for (int impl = 0; impl < 2; ++impl) {
        kvattn::cuda_model::Gemm& g = impl == 0 ? lt : gv;
        __nv_bfloat16* y = impl == 0 ? y0 : y1;
        us[si][mi][impl] = time_graph(st, iters, [&](int i, cudaStream_t stream) {
          g.run(x, s.k, m, w + (i % copies) * (wbytes / 2), s.n, s.k, y, s.n, stream);
        });
      }
      // Same inputs (the last copy each wrote): compare the two outputs.
      const int last = (iters - 1) % copies;
      lt.run(x, s.k, m, w + last * (wbytes / 2), s.n, s.k, y0, s.n, st);
      gv.run(x, s.k, m, w + last * (wbytes / 2), s.n, s.k, y1, s.n, st);
      BENCH_CUDA(cudaStreamSynchronize(st));
      std::vector<uint16_t> h0(static_cast<size_t>(m * s.n)), h1(h0.size());
      BENCH_CUDA(cudaMemcpy(h0.data(), y0, h0.size() * 2, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(h1.data(), y1, h1.size() * 2, cudaMemcpyDeviceToHost));
      double maxd = 0.0;
      for (size_t i = 0; i < h0.size(); ++i)
        maxd = std::max(maxd, static_cast<double>(std::fabs(bf16_bits_to_float(h0[i]) - bf16_bits_to_float(h1[i]))));
      const double gb = wbytes / 1e9;
      const double t0 = us[si][mi][0], t1 = us[si][mi][1];
      std::printf("| %s | %ldx%ld | %.1f | %d | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% | "
                  "%.2fx | %.3g |\n",
                  s.name, static_cast<long>(s.n), static_cast<long>(s.k), wbytes / 1e6, m, t0,
                  gb / (t0 * 1e-6), 100.0 * gb / (t0 * 1e-6) / copy_gbps, t1,
                  gb / (t1 * 1e-6), 100.0 * gb / (t1 * 1e-6) / copy_gbps, t0 / t1, maxd);
    }
    BENCH_CUDA(cudaFree(w));
    BENCH_CUDA(cudaFree(x));
    BENCH_CUDA(cudaFree(y0));
    BENCH_CUDA(cudaFree(y1));
  }

  double token_bytes = 0.0;
  for (size_t si = 0; si < std::size(shapes); ++si)
    token_bytes += shapes[si].per_step * static_cast<double>(shapes[si].n * shapes[si].k) * 2;
  std::printf("\nper decode token (28 x (qkv + o_proj + gate_up + down) + lm_head, %.3f GB; "
              "floor at the copy rate %.1f us):\n",
              token_bytes / 1e9, token_bytes / copy_gbps / 1e3);
  // "auto": what Gemm does by default (Gemv::preferred per shape), from the same timings.
  std::printf("| M | cuBLASLt us | of copy | GEMV (all) us | of copy | auto (default) us | of copy "
              "| auto saves us |\n|---|---|---|---|---|---|---|---|\n");
  for (int mi = 0; mi < 3; ++mi) {
    double t[3] = {0, 0, 0};
    for (size_t si = 0; si < std::size(shapes); ++si) {
      const double wgt = shapes[si].per_step;
      t[0] += wgt * us[si][mi][0];
      t[1] += wgt * us[si][mi][1];
      const bool pick = kvattn::cuda_model::Gemv::preferred(ms[mi], shapes[si].n, shapes[si].k);
      t[2] += wgt * us[si][mi][pick ? 1 : 0];
    }
    auto frac = [&](double tu) { return 100.0 * token_bytes / (tu * 1e-6) / 1e9 / copy_gbps; };
    std::printf("| %d | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %.0f%% | %.1f |\n", ms[mi], t[0],
                frac(t[0]), t[1], frac(t[1]), t[2], frac(t[2]), t[0] - t[2]);
  }
  return 0;
}
