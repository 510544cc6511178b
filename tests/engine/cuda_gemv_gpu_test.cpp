// The small-rows GEMV (engine/model/cuda_gemv.h) that Gemm::run uses for rows <= 8: against a
// float64 CPU reference and against the cuBLASLt path, over the decode shapes of Qwen3-0.6B and
// odd ones (K not a multiple of the 256-element warp step, N not a multiple of the tile),
// strided x and y; inside a captured CUDA graph; and the cases it declines. Exits 77 without a
// CUDA device (or in a build without the CUDA backend).
//
// Error bound. y = bf16(s) where s is the fp32 sum of K products x_k w_k (each exact in fp32:
// bf16 x bf16 has 16 significant bits). In any summation order |s - exact| <= (K - 1) u
// sum_k |x_k w_k| with u = 2^-24 (the standard recursive-summation bound, first order), and
// rounding s to bf16 adds at most half a bf16 ulp. So, with exact = the float64 reference
// (exact up to 2^-53 relative),
//   |y - exact| <= ulp_bf16(max(|y|, |exact|)) + K 2^-24 sum_k |x_k w_k|     (bound)
// (one full ulp covers the half ulp of rounding with the ulp taken at either end). Two
// implementations that both obey it (GEMV, cuBLASLt) differ by at most one ulp plus twice the
// accumulation term, which is what the GEMV-vs-cuBLASLt comparison checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kvattn/core/device.h"
#include "engine_test_util.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_gemv.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

#define T_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

float bf2f(uint16_t b) { return bf16_to_float(bf16_t{b}); }
uint16_t f2bf(float f) { return float_to_bf16(f).bits; }  // round to nearest even
double ulp_bf16(double v) {
  v = std::fabs(v);
  if (v < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(v, &e);  // v = f 2^e, f in [0.5, 1): the leading bit is 2^(e-1)
  return std::ldexp(1.0, e - 1 - 7);
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

struct Case {
  int64_t m, n, k, ldx, ldy;
};

// Random bf16 x [m, ldx] and w [n, k] in [-1, 1) (fresh per seed), the float64 reference and
// sum |x w| per output.
struct Problem {
  Case c;
  std::vector<uint16_t> x, w;
  std::vector<double> ref, mag;
  Problem(const Case& cs, uint64_t seed) : c(cs) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    x.assign(static_cast<size_t>(c.m * c.ldx), f2bf(7.0f));  // padding: never read
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = 0; j < c.k; ++j) x[r * c.ldx + j] = f2bf(u(rng));
    w.resize(static_cast<size_t>(c.n * c.k));
    for (auto& v : w) v = f2bf(u(rng));
    ref.assign(static_cast<size_t>(c.m * c.n), 0.0);
    mag.assign(ref.size(), 0.0);
    std::vector<double> xd(static_cast<size_t>(c.m * c.k));
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = 0; j < c.k; ++j) xd[r * c.k + j] = bf2f(x[r * c.ldx + j]);
    std::vector<double> acc(c.m), am(c.m);
    for (int64_t i = 0; i < c.n; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(am.begin(), am.end(), 0.0);
      const uint16_t* wr = w.data() + i * c.k;
      for (int64_t j = 0; j < c.k; ++j) {
        const double wd = bf2f(wr[j]);
        for (int64_t r = 0; r < c.m; ++r) {
          const double p = wd * xd[r * c.k + j];
          acc[r] += p;
          am[r] += std::fabs(p);
        }
      }
      for (int64_t r = 0; r < c.m; ++r) {
        ref[r * c.n + i] = acc[r];
        mag[r * c.n + i] = am[r];
      }
    }
  }
};

constexpr uint16_t kPoison = 0xffc1;  // a NaN

// Runs `gemm` on the problem; returns y [m, ldy] from the device (poisoned before).
std::vector<uint16_t> run_gemm(cuda_model::Gemm& gemm, const Problem& p, const void* dx,
                               const void* dw) {
  const Case& c = p.c;
  std::vector<uint16_t> y(static_cast<size_t>(c.m * c.ldy), kPoison);
  DevBuf dy(y.size() * 2);
  EXPECT_EQ(cudaMemcpy(dy.p, y.data(), y.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  gemm.run(dx, c.ldx, c.m, dw, c.n, c.k, dy.p, c.ldy, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return y;
}

// Checks y against the reference (bound in the file comment, `slack` times the accumulation
// term) and that y's padding columns still hold the poison. Returns max |err| / bound.
double check(const Problem& p, const std::vector<uint16_t>& y, const char* what,
             const std::vector<uint16_t>* other = nullptr) {
  const Case& c = p.c;
  double worst = 0.0;
  int64_t bad = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t i = 0; i < c.ldy; ++i) {
      const uint16_t got = y[r * c.ldy + i];
      if (i >= c.n) {
        if (got != kPoison && bad++ < 5)
          ADD_FAILURE() << what << ": padding y[" << r << "][" << i << "] written";
        continue;
      }
      const double g = bf2f(got);
      const double acc_term = static_cast<double>(c.k) * std::ldexp(1.0, -24) * p.mag[r * c.n + i];
      double want, bound;
      if (other == nullptr) {
        want = p.ref[r * c.n + i];
        bound = ulp_bf16(std::max(std::fabs(g), std::fabs(want))) + acc_term;
      } else {
        want = bf2f((*other)[r * c.ldy + i]);
        bound = ulp_bf16(std::max(std::fabs(g), std::fabs(want))) + 2 * acc_term;
      }
      const double err = std::fabs(g - want);
      if (!(err <= bound)) {
        if (bad++ < 5)
          ADD_FAILURE() << what << " m=" << c.m << " n=" << c.n << " k=" << c.k << ": y[" << r
                        << "][" << i << "] = " << g << ", want " << want << " (bound " << bound
                        << ")";
        worst = std::max(worst, std::isfinite(err) ? err / bound : 1e30);
      } else {
        worst = std::max(worst, err / bound);
      }
    }
  }
  return worst;
}

TEST(CudaGemv, MatchesFloat64AndCublasLt) {
  cuda_model::Gemm gv(0), lt(0);
  gv.use_gemv(true);
  lt.use_gemv(false);
  cuda_model::Gemm au(0);  // KVATTN_GEMV=auto: the GEMV only where it measured faster
  au.set_gemv_mode(cuda_model::Gemv::Mode::kAuto);
  cuda_model::Gemv direct(0);
  const std::vector<std::pair<int64_t, int64_t>> nks = {
      {4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072},
      {151936, 1024}, {1000, 72}, {7, 8}, {333, 4104}};
  uint64_t seed = 1;
  for (const auto& [n, k] : nks) {
    for (int64_t m : {1, 2, 3, 5, 8}) {
      const Case c{m, n, k, k + 8 * ((m % 3) + 1), n + 3 + (m % 2)};  // ldx > k, ldy > n
      Problem p(c, seed++);
      DevBuf dx(p.x.size() * 2), dw(p.w.size() * 2);
      T_CUDA(cudaMemcpy(dx.p, p.x.data(), p.x.size() * 2, cudaMemcpyHostToDevice));
      T_CUDA(cudaMemcpy(dw.p, p.w.data(), p.w.size() * 2, cudaMemcpyHostToDevice));
      // The GEMV takes this case (Gemm would silently fall back otherwise).
      {
        DevBuf dy(static_cast<size_t>(c.m * c.ldy) * 2);
        EXPECT_TRUE(direct.run(dx.p, c.ldx, c.m, dw.p, c.n, c.k, dy.p, c.ldy, nullptr));
        T_CUDA(cudaDeviceSynchronize());
      }
      const auto yg = run_gemm(gv, p, dx.p, dw.p);
      const auto yl = run_gemm(lt, p, dx.p, dw.p);
      EXPECT_LT(check(p, run_gemm(au, p, dx.p, dw.p), "auto mode vs float64"), 1.0);
      const double eg = check(p, yg, "gemv vs float64");
      const double el = check(p, yl, "cublaslt vs float64");
      const double ex = check(p, yg, "gemv vs cublaslt", &yl);
      int64_t same = 0;
      for (int64_t r = 0; r < c.m; ++r)
        for (int64_t i = 0; i < c.n; ++i) same += yg[r * c.ldy + i] == yl[r * c.ldy + i];
      std::printf(
          "m=%ld n=%6ld k=%4ld: max err/bound gemv %.3f cublaslt %.3f gemv-vs-lt %.3f; "
          "bit-equal to cublaslt %.1f%%\n",
          static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), eg, el, ex,
          100.0 * same / static_cast<double>(c.m * c.n));
    }
  }
}

TEST(CudaGemv, AutoModePicksTheMeasuredWinners) {
  using cuda_model::Gemv;
  for (int64_t m = 1; m <= 8; ++m) {
    EXPECT_TRUE(Gemv::preferred(m, 1024, 2048)) << m;   // o_proj
    EXPECT_TRUE(Gemv::preferred(m, 1024, 3072)) << m;   // down
    EXPECT_FALSE(Gemv::preferred(m, 4096, 1024)) << m;  // qkv
    EXPECT_FALSE(Gemv::preferred(m, 6144, 1024)) << m;  // gate_up
    EXPECT_EQ(Gemv::preferred(m, 151936, 1024), m <= 4) << m;  // lm_head
  }
  EXPECT_FALSE(Gemv::preferred(9, 1024, 2048));
  EXPECT_FALSE(Gemv::preferred(0, 1024, 2048));
}

TEST(CudaGemv, DeclinesUnsupportedCasesAndGemmStaysCorrect) {
  cuda_model::Gemv direct(0);
  cuda_model::Gemm gv(0);
  gv.use_gemv(true);
  const Case c{3, 300, 256, 260, 301};  // ldx % 8 != 0: rows are not 16-byte aligned
  Problem p(c, 99);
  DevBuf dx(p.x.size() * 2), dw(p.w.size() * 2), dy(static_cast<size_t>(c.m * c.ldy) * 2);
  T_CUDA(cudaMemcpy(dx.p, p.x.data(), p.x.size() * 2, cudaMemcpyHostToDevice));
  T_CUDA(cudaMemcpy(dw.p, p.w.data(), p.w.size() * 2, cudaMemcpyHostToDevice));
  EXPECT_FALSE(direct.run(dx.p, c.ldx, c.m, dw.p, c.n, c.k, dy.p, c.ldy, nullptr));
  EXPECT_FALSE(direct.run(dx.p, 256, 9, dw.p, c.n, c.k, dy.p, c.ldy, nullptr));  // rows > 8
  EXPECT_FALSE(direct.run(dx.p, 256, 1, dw.p, c.n, 250, dy.p, c.ldy, nullptr));  // k % 8
  EXPECT_FALSE(direct.run(static_cast<char*>(dx.p) + 2, 256, 1, dw.p, c.n, 256, dy.p, c.ldy,
                          nullptr));  // x misaligned
  EXPECT_FALSE(direct.run(dx.p, 1 << 20, 8, dw.p, c.n, 1 << 20, dy.p, c.ldy, nullptr));  // smem
  T_CUDA(cudaDeviceSynchronize());
  EXPECT_LT(check(p, run_gemm(gv, p, dx.p, dw.p), "fallback vs float64"), 1.0);
}

TEST(CudaGemv, RunsInsideACapturedGraph) {
  cuda_model::Gemm gv(0);
  gv.use_gemv(true);
  cudaStream_t st = nullptr;
  T_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (const Case& c : {Case{3, 4096, 1024, 1024, 4096}, Case{8, 1024, 3072, 3072, 1024},
                        Case{1, 151936, 1024, 1024, 151936}}) {
    Problem p(c, 1000 + c.m);
    DevBuf dx(p.x.size() * 2), dw(p.w.size() * 2), dy(static_cast<size_t>(c.m * c.ldy) * 2);
    T_CUDA(cudaMemcpy(dx.p, p.x.data(), p.x.size() * 2, cudaMemcpyHostToDevice));
    T_CUDA(cudaMemcpy(dw.p, p.w.data(), p.w.size() * 2, cudaMemcpyHostToDevice));
    const auto eager = run_gemm(gv, p, dx.p, dw.p);
    T_CUDA(cudaMemset(dy.p, 0xff, static_cast<size_t>(c.m * c.ldy) * 2));
    T_CUDA(cudaDeviceSynchronize());
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    T_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    gv.run(dx.p, c.ldx, c.m, dw.p, c.n, c.k, dy.p, c.ldy, st);
    gv.run(dx.p, c.ldx, c.m, dw.p, c.n, c.k, dy.p, c.ldy, st);
    T_CUDA(cudaStreamEndCapture(st, &graph));
    size_t nodes = 0;
    T_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
    EXPECT_EQ(nodes, 2u);  // one kernel per call, nothing else
    T_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) T_CUDA(cudaGraphLaunch(exec, st));
    T_CUDA(cudaStreamSynchronize(st));
    std::vector<uint16_t> y(eager.size());
    T_CUDA(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(y, eager) << "graph replay differs from the eager run, m=" << c.m;
    EXPECT_LT(check(p, y, "graph vs float64"), 1.0);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(st);
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
