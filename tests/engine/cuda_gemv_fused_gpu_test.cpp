// The fused decode GEMVs (engine/model/cuda_gemv.h: run_rmsnorm, run_rmsnorm_silu) against
// (1) the unfused kernels they replace, bit for bit: k::add_rmsnorm (the residual written back
// and the normalised rows), then Gemv::run on those rows (same work split, so the same sums),
// then k::silu_mul; and (2) a float64 CPU reference computed from the same bf16 inputs. Rows 1
// to 8; hidden 64 (the tiny checkpoints), 576 (SmolLM2), 1024 (Qwen3-0.6B), 1032 (not a
// multiple of the 256-element warp step), 4096; n and inter not multiples of a CTA tile; both
// split rules (kDefault's R = 2 at qkv/gate_up sizes, kLegacy). Inputs are fresh random per
// case, every output is poisoned with NaN before the call. Also: inside a captured CUDA graph
// (one node per call), with PDL, and the argument checks. Exits 77 without a CUDA device (or
// in a build without the CUDA backend).
//
// Float64 bounds. h = bf16(w_n * bf16(v * inv)) with v = bf16(x + add) (exact inputs to the
// reference), inv = rsqrtf(...): two roundings to bf16 and rsqrtf's ~2^-22 relative error, so
// |h - h64| <= 1.5 ulp_bf16 (+ tiny). y: as cuda_gemv_gpu_test (the GEMV's sums of the bf16 h
// it used, one bf16 rounding): |y - y64| <= ulp_bf16 + K 2^-24 sum |h w|. act: silu_mul of the
// bf16 gate/up the GEMV rounded, against float64 silu(g) * u of those same values: two bf16
// roundings and expf's few-ulp float error, <= 1.5 ulp_bf16 of the result (+ tiny).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/core/error.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_gemv.h"
#include "engine/model/cuda_kernels.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

namespace k = cuda_model;

#define T_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

using Bits = std::vector<uint16_t>;
constexpr uint16_t kPoison = 0xffc1;  // a NaN

double bf2d(uint16_t b) { return bf16_to_float(bf16_t{b}); }
uint16_t f2bf(float f) { return float_to_bf16(f).bits; }
double ulp_bf16(double v) {
  v = std::fabs(v);
  if (v < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, e - 1 - 7);
}

// A device copy of host bits (or `count` poisoned elements), freed at scope end.
struct Dev {
  void* p = nullptr;
  size_t n = 0;
  explicit Dev(const Bits& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * 2 + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : Dev(Bits(count, kPoison)) {}
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Bits get() const {
    Bits h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void poison() { EXPECT_EQ(cudaMemcpy(p, Bits(n, kPoison).data(), n * 2, cudaMemcpyHostToDevice),
                            cudaSuccess); }
};

Bits random_bits(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  Bits b(n);
  for (auto& v : b) v = f2bf(u(rng));
  return b;
}

// One case: residual x and add [rows, hidden], norm weight [hidden], w [n, hidden].
struct Case {
  int64_t rows, hidden, n;
  bool with_add;
};

struct Inputs {
  Bits x, add, nw, w;
  Inputs(const Case& c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    x = random_bits(rng, c.rows * c.hidden, -2.0f, 2.0f);
    add = random_bits(rng, c.rows * c.hidden, -1.0f, 1.0f);
    nw = random_bits(rng, c.hidden, 0.5f, 1.5f);
    w = random_bits(rng, c.n * c.hidden, -1.0f, 1.0f);
  }
};

// float64 rmsnorm of v = bf16(x + add) (the bf16 v: exact inputs), times the norm weight.
std::vector<double> ref_h(const Case& c, const Inputs& in, const Bits& v) {
  std::vector<double> h(v.size());
  for (int64_t r = 0; r < c.rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < c.hidden; ++i) ss += bf2d(v[r * c.hidden + i]) * bf2d(v[r * c.hidden + i]);
    const double inv = 1.0 / std::sqrt(ss / c.hidden + 1e-6);
    for (int64_t i = 0; i < c.hidden; ++i)
      h[r * c.hidden + i] = bf2d(in.nw[i]) * bf2d(v[r * c.hidden + i]) * inv;
  }
  return h;
}

// Checks y [rows, ldy] (columns >= n: still poisoned) against float64 sums of the bf16 h the
// kernel used; returns the worst err / bound.
double check_gemv(const Case& c, const Bits& h, const Bits& w, const Bits& y, int64_t ldy,
                  const char* what) {
  double worst = 0;
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < ldy; ++j) {
      const uint16_t got = y[r * ldy + j];
      if (j >= c.n) {
        if (got != kPoison && bad++ < 5) ADD_FAILURE() << what << ": padding written";
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t i = 0; i < c.hidden; ++i) {
        const double p = bf2d(h[r * c.hidden + i]) * bf2d(w[j * c.hidden + i]);
        s += p;
        mag += std::fabs(p);
      }
      const double g = bf2d(got);
      const double bound = ulp_bf16(std::max(std::fabs(g), std::fabs(s))) +
                           c.hidden * std::ldexp(1.0, -24) * mag;
      const double err = std::fabs(g - s);
      if (!(err <= bound)) {
        if (bad++ < 5)
          ADD_FAILURE() << what << " rows=" << c.rows << " hidden=" << c.hidden << " n=" << c.n
                        << ": y[" << r << "][" << j << "] = " << g << ", want " << s;
        worst = std::max(worst, std::isfinite(err) ? err / bound : 1e30);
      } else {
        worst = std::max(worst, err / bound);
      }
    }
  }
  return worst;
}

// Number of differing elements (NaN bits count as themselves: poison left = a difference).
int64_t diff_count(const Bits& a, const Bits& b) {
  int64_t d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
  return d + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

// The unfused chain on the device: x_ref = bf16(x + add) (add_rmsnorm writes it back), h_ref.
struct Unfused {
  Bits x, h;
};
Unfused run_add_rmsnorm(const Case& c, const Inputs& in) {
  Dev x(in.x), add(in.add), nw(in.nw), h(static_cast<size_t>(c.rows * c.hidden));
  k::add_rmsnorm(x.p, c.with_add ? add.p : nullptr, nw.p, 1e-6f, h.p, nullptr, c.rows,
                 c.hidden, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {x.get(), h.get()};
}

void check_h(const Case& c, const Inputs& in, const Bits& v, const Bits& h) {
  const std::vector<double> want = ref_h(c, in, v);
  int bad = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    const double g = bf2d(h[i]);
    const double bound = 1.5 * ulp_bf16(std::max(std::fabs(g), std::fabs(want[i]))) + 1e-30;
    if (!(std::fabs(g - want[i]) <= bound) && bad++ < 5)
      ADD_FAILURE() << "h[" << i << "] = " << g << ", float64 " << want[i];
  }
}

class FusedGemv : public ::testing::Test {
 protected:
  k::Gemv gemv{0};
};

TEST_F(FusedGemv, NormGemvEqualsAddRmsnormThenGemvBitForBit) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1024, 4096}, {1024, 1000}, {576, 960}, {64, 256}, {1032, 333}, {4096, 2056}};
  uint64_t seed = 10;
  for (auto rule : {k::Gemv::SplitRule::kDefault, k::Gemv::SplitRule::kLegacy}) {
    gemv.set_split_rule(rule);
    for (const auto& [hidden, n] : shapes) {
      for (int64_t rows = 1; rows <= 8; ++rows) {
        if (hidden >= 4096 && rows % 3 != 1) continue;  // 1, 4, 7: keep the CPU part short
        const Case c{rows, hidden, n, rows % 4 != 3};     // rows 3, 7: no residual add
        const Inputs in(c, seed++);
        const Unfused ref = run_add_rmsnorm(c, in);
        const int64_t ldy = n + 5;
        Dev w(in.w), h_ref(ref.h), y_ref(static_cast<size_t>(rows * ldy));
        ASSERT_TRUE(gemv.run(h_ref.p, hidden, rows, w.p, n, hidden, y_ref.p, ldy, nullptr));
        T_CUDA(cudaDeviceSynchronize());

        Dev x(in.x), add(in.add), nw(in.nw), x_out(static_cast<size_t>(rows * hidden)),
            h_out(static_cast<size_t>(rows * hidden)), y(static_cast<size_t>(rows * ldy));
        k::Gemv::NormInput ni;
        ni.x = x.p;
        ni.add = c.with_add ? add.p : nullptr;
        ni.weight = nw.p;
        ni.eps = 1e-6f;
        ni.x_out = c.with_add ? x_out.p : nullptr;
        ni.h_out = h_out.p;
        gemv.run_rmsnorm(ni, rows, hidden, w.p, n, y.p, ldy, nullptr);
        T_CUDA(cudaDeviceSynchronize());
        const Bits yb = y.get(), hb = h_out.get();
        const std::string at = "hidden=" + std::to_string(hidden) + " n=" + std::to_string(n) +
                               " rows=" + std::to_string(rows) +
                               (rule == k::Gemv::SplitRule::kLegacy ? " legacy" : "");
        EXPECT_EQ(diff_count(x.get(), in.x), 0) << at << ": x was written";
        if (c.with_add) {
          EXPECT_EQ(diff_count(x_out.get(), ref.x), 0) << at << ": residual != add_rmsnorm's";
        } else {
          EXPECT_EQ(diff_count(x_out.get(), Bits(x_out.n, kPoison)), 0) << at << ": x_out written";
        }
        EXPECT_EQ(diff_count(hb, ref.h), 0) << at << ": h != add_rmsnorm's";
        EXPECT_EQ(diff_count(yb, y_ref.get()), 0) << at << ": y != Gemv::run on add_rmsnorm's h";
        check_h(c, in, c.with_add ? ref.x : in.x, hb);
        EXPECT_LT(check_gemv(c, hb, in.w, yb, ldy, at.c_str()), 1.0) << at;
      }
    }
  }
}

TEST_F(FusedGemv, NormSiluGemvEqualsAddRmsnormGemvSiluMulBitForBit) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {  // hidden, inter
      {1024, 3072}, {576, 1536}, {64, 128}, {1024, 1000}, {1032, 3}, {4096, 1100}};
  uint64_t seed = 500;
  for (auto rule : {k::Gemv::SplitRule::kDefault, k::Gemv::SplitRule::kLegacy}) {
    gemv.set_split_rule(rule);
    for (const auto& [hidden, inter] : shapes) {
      for (int64_t rows = 1; rows <= 8; ++rows) {
        if (hidden >= 4096 && rows % 3 != 2) continue;
        const Case c{rows, hidden, 2 * inter, rows != 5};
        const Inputs in(c, seed++);
        const Unfused ref = run_add_rmsnorm(c, in);
        Dev w(in.w), h_ref(ref.h), gate_up(static_cast<size_t>(rows * 2 * inter)),
            act_ref(static_cast<size_t>(rows * inter));
        ASSERT_TRUE(gemv.run(h_ref.p, hidden, rows, w.p, 2 * inter, hidden, gate_up.p,
                             2 * inter, nullptr));
        k::silu_mul(gate_up.p, rows, inter, act_ref.p, nullptr);
        T_CUDA(cudaDeviceSynchronize());

        const int64_t ldact = inter + 3;
        Dev x(in.x), add(in.add), nw(in.nw), x_out(static_cast<size_t>(rows * hidden)),
            act(static_cast<size_t>(rows * ldact));
        k::Gemv::NormInput ni;
        ni.x = x.p;
        ni.add = c.with_add ? add.p : nullptr;
        ni.weight = nw.p;
        ni.eps = 1e-6f;
        ni.x_out = c.with_add ? x_out.p : nullptr;
        gemv.run_rmsnorm_silu(ni, rows, hidden, w.p, inter, act.p, ldact, nullptr);
        T_CUDA(cudaDeviceSynchronize());
        const std::string at = "hidden=" + std::to_string(hidden) + " inter=" +
                               std::to_string(inter) + " rows=" + std::to_string(rows) +
                               (rule == k::Gemv::SplitRule::kLegacy ? " legacy" : "");
        const Bits ab = act.get(), want = act_ref.get(), gu = gate_up.get();
        if (c.with_add) {
          EXPECT_EQ(diff_count(x_out.get(), ref.x), 0) << at << ": residual";
        }
        int64_t differ = 0, pad = 0;
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < ldact; ++j) {
            const uint16_t got = ab[r * ldact + j];
            if (j >= inter) {
              pad += got != kPoison;
              continue;
            }
            differ += got != want[r * inter + j];
            // float64 silu(g) * u of the bf16 gate/up the GEMV produced.
            const double g = bf2d(gu[r * 2 * inter + j]), u = bf2d(gu[r * 2 * inter + inter + j]);
            const double e = g / (1.0 + std::exp(-g)) * u;
            const double a = bf2d(got);
            if (!(std::fabs(a - e) <= 1.5 * ulp_bf16(std::max(std::fabs(a), std::fabs(e))) + 1e-30) &&
                bad++ < 5)
              ADD_FAILURE() << at << ": act[" << r << "][" << j << "] = " << a << ", float64 " << e;
          }
        }
        EXPECT_EQ(differ, 0) << at << ": act != add_rmsnorm + Gemv::run + silu_mul";
        EXPECT_EQ(pad, 0) << at << ": act's padding written";
        // The gate/up sums themselves against float64 (what the act check builds on).
        EXPECT_LT(check_gemv(c, ref.h, in.w, gu, 2 * inter, at.c_str()), 1.0) << at;
      }
    }
  }
}

TEST_F(FusedGemv, RunsInsideACapturedGraphAndWithPdl) {
  cudaStream_t st = nullptr;
  T_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const Case c{4, 1024, 4096, true};
  const int64_t inter = 3072;
  const Inputs in(c, 77);
  std::mt19937_64 rng(78);
  const Bits wgu = random_bits(rng, 2 * inter * c.hidden, -1.0f, 1.0f);
  Dev x(in.x), add(in.add), nw(in.nw), w(in.w), w2(wgu), x1(static_cast<size_t>(4 * 1024)),
      x2(static_cast<size_t>(4 * 1024)), y(static_cast<size_t>(4 * 4096)),
      act(static_cast<size_t>(4 * inter));
  // As run_layers chains them: x1 = bf16(x + add) and y; then x2 = bf16(x1 + add) and act.
  auto enqueue = [&](k::Launch on) {
    k::Gemv::NormInput a;
    a.x = x.p;
    a.add = add.p;
    a.weight = nw.p;
    a.eps = 1e-6f;
    a.x_out = x1.p;
    gemv.run_rmsnorm(a, c.rows, c.hidden, w.p, c.n, y.p, c.n, on);
    k::Gemv::NormInput b = a;
    b.x = x1.p;
    b.add = add.p;
    b.x_out = x2.p;
    gemv.run_rmsnorm_silu(b, c.rows, c.hidden, w2.p, inter, act.p, inter, on);
  };
  enqueue(st);
  T_CUDA(cudaStreamSynchronize(st));
  const Bits want_y = y.get(), want_act = act.get(), want_x2 = x2.get();
  for (Dev* d : {&y, &act, &x1, &x2}) d->poison();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  T_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  enqueue(st);
  T_CUDA(cudaStreamEndCapture(st, &graph));
  size_t nodes = 0;
  T_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 2u);  // one kernel per call, nothing else
  T_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) T_CUDA(cudaGraphLaunch(exec, st));
  T_CUDA(cudaStreamSynchronize(st));
  EXPECT_EQ(y.get(), want_y);
  EXPECT_EQ(act.get(), want_act);
  EXPECT_EQ(x2.get(), want_x2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  if (k::pdl_supported(0)) {  // programmatic launches: the same bytes
    for (Dev* d : {&y, &act, &x1, &x2}) d->poison();
    for (int rep = 0; rep < 3; ++rep) enqueue(k::Launch{st, true});
    T_CUDA(cudaStreamSynchronize(st));
    EXPECT_EQ(y.get(), want_y);
    EXPECT_EQ(act.get(), want_act);
    EXPECT_EQ(x2.get(), want_x2);
  } else {
    std::printf("PDL not supported here: the PDL part is skipped\n");
  }
  cudaStreamDestroy(st);
}

TEST_F(FusedGemv, RejectsBadArgumentsNamingThem) {
  Dev x(static_cast<size_t>(8 * 1024)), x_out(static_cast<size_t>(8 * 1024)),
      nw(static_cast<size_t>(1024)), w(static_cast<size_t>(64 * 1024)),
      y(static_cast<size_t>(8 * 64));
  k::Gemv::NormInput ni;
  ni.x = x.p;
  ni.weight = nw.p;
  ni.eps = 1e-6f;
  auto msg = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(ni, 0, 1024, w.p, 64, y.p, 64, nullptr); }).find("rows"),
            std::string::npos);
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(ni, 9, 1024, w.p, 64, y.p, 64, nullptr); }).find("rows"),
            std::string::npos);
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(ni, 1, 1020, w.p, 64, y.p, 64, nullptr); }).find("hidden"),
            std::string::npos);
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(ni, 1, 1024, w.p, 64, y.p, 63, nullptr); }).find("ldy"),
            std::string::npos);
  k::Gemv::NormInput alias = ni;
  alias.x_out = x.p;  // the other CTAs still read x
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(alias, 1, 1024, w.p, 64, y.p, 64, nullptr); }).find("x_out"),
            std::string::npos);
  k::Gemv::NormInput mis = ni;
  mis.x = static_cast<char*>(x.p) + 2;
  EXPECT_NE(msg([&] { gemv.run_rmsnorm(mis, 1, 1024, w.p, 64, y.p, 64, nullptr); }).find("x must"),
            std::string::npos);
  EXPECT_NE(msg([&] { gemv.run_rmsnorm_silu(ni, 1, 1024, w.p, 32, y.p, 31, nullptr); })
                .find("ldact"),
            std::string::npos);
  EXPECT_FALSE(gemv.fused_supported(8, int64_t{1} << 20));  // rows do not fit in shared memory
  EXPECT_TRUE(gemv.fused_supported(8, 8192));
  T_CUDA(cudaDeviceSynchronize());
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
