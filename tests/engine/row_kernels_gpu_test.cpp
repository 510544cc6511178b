// The CUDA model's row kernels (engine/model/cuda_kernels.h: add_rmsnorm in its three forms,
// embed, embed_rmsnorm, silu_mul, add_bias) against a float64 CPU model, and against the
// legacy kernels they replaced (legacy_kernels()) byte for byte: issue 20 rewrote them for
// bandwidth with the same arithmetic in the same order, so nothing less than equal bytes is
// accepted there. Shapes: T = 1, 7, 4096, 4097 tokens; hidden 576 (SmolLM2), 1024
// (Qwen3-0.6B), 4096, and 64, 2560 and the fallbacks (hidden 100 and 8192, a misaligned
// pointer: the legacy kernel runs under the new name and must still be right). Fresh random
// inputs per case (the seed in the trace), outputs poisoned with NaN before each launch.
// Exits 77 without a CUDA device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"
#include "support/case_util.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_kernels.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

using Bits = std::vector<uint16_t>;

float bf2f(uint16_t b) { return bf16_to_float(bf16_t{b}); }
uint16_t f2bf(float f) { return float_to_bf16(f).bits; }  // round to nearest even

bool quick() {  // compute-sanitizer runs
  const char* q = std::getenv("KVATTN_GPU_TEST_QUICK");
  return q != nullptr && q[0] != '\0' && q[0] != '0';
}

Bits random_bf16(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  Bits v(n);
  for (auto& x : v) x = f2bf(u(rng));
  return v;
}

// A device buffer of n bf16 plus `lead` elements before the data (a misaligned start when
// lead is odd), every byte 0xFF (bf16 NaN) except the data when given.
struct Buf {
  Tensor t;
  int64_t lead = 0, n = 0;
  void* ptr() { return static_cast<uint16_t*>(t.data()) + lead; }
  Bits get() const {
    Tensor h = t.to(Device::cpu());
    const auto* p = static_cast<const uint16_t*>(h.data()) + lead;
    return Bits(p, p + n);
  }
};

Buf make_buf(int64_t n, const Bits* data = nullptr, int64_t lead = 0) {
  Buf b;
  b.lead = lead;
  b.n = n;
  b.t = Tensor::empty({std::max<int64_t>(n + lead, 1)}, DType::kBF16, Device::cuda(0));
  EXPECT_EQ(cudaMemset(b.t.data(), 0xFF, (n + lead) * 2), cudaSuccess);
  if (data != nullptr) {
    EXPECT_EQ(cudaMemcpy(b.ptr(), data->data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return b;
}

Tensor upload_i32(const std::vector<int32_t>& v) {
  Tensor h = Tensor::empty({static_cast<int64_t>(std::max<size_t>(v.size(), 1))}, DType::kI32);
  std::memcpy(h.data(), v.data(), v.size() * 4);
  return h.to(Device::cuda(0));
}

// Runs fn with the legacy kernels, then with the new ones; both results.
template <typename Fn>
auto legacy_and_new(Fn&& fn) {
  cuda_model::set_legacy_kernels(true);
  auto old = fn();
  cuda_model::set_legacy_kernels(false);
  auto now = fn();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return std::make_pair(old, now);
}

int64_t count_diff(const Bits& a, const Bits& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

// The float64 RMSNorm of rows v (already the kernels' bf16 x or x + add): out = w * v * inv.
// Bound: the kernels round v * inv and then w * that to bf16 (2^-9 relative each) and use
// rsqrtf (2 ulp); 2^-7 |ref| + 1e-6 covers it and is far below a wrong sum or scale.
int64_t rmsnorm_errors(const std::vector<double>& v, const Bits& w, const Bits& out,
                       int64_t rows, int64_t H, double eps, double* worst) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += v[r * H + i] * v[r * H + i];
    const double inv = 1.0 / std::sqrt(ss / H + eps);
    for (int64_t i = 0; i < H; ++i) {
      const double ref = bf2f(w[i]) * v[r * H + i] * inv;
      const double err = std::fabs(bf2f(out[r * H + i]) - ref);
      const double tol = std::ldexp(std::fabs(ref), -7) + 1e-6;
      *worst = std::max(*worst, err / tol);
      bad += !(err <= tol);
    }
  }
  return bad;
}

struct NormCase {
  int64_t T, H;
  int form;      // 0: x + add written back, 1: add null, 2: rows (the final norm)
  int64_t lead;  // odd: misaligned x (the legacy fallback)
};

std::string describe(const NormCase& c) {
  std::ostringstream os;
  os << "T " << c.T << " H " << c.H << " form "
     << (c.form == 0 ? "x+add" : c.form == 1 ? "x" : "rows") << " lead " << c.lead;
  return os.str();
}

void run_norm_case(const NormCase& c, uint64_t seed) {
  SCOPED_TRACE(test::case_note(0, seed, describe(c)));
  std::mt19937_64 rng(seed);
  const int64_t T = c.T, H = c.H, n = T * H;
  const Bits x = random_bf16(rng, n, -3.0f, 3.0f), add = random_bf16(rng, n, -3.0f, 3.0f);
  const Bits w = random_bf16(rng, H, 0.5f, 1.5f);
  std::vector<int32_t> rows;
  if (c.form == 2) {
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(T - 1));
    for (int i = 0; i < 5; ++i) rows.push_back(pick(rng));
    rows.push_back(static_cast<int32_t>(T - 1));
  }
  const Tensor drows = upload_i32(rows);
  const int64_t R = c.form == 2 ? static_cast<int64_t>(rows.size()) : T;
  const float eps = 1e-6f;
  auto run = [&] {
    Buf dx = make_buf(n, &x, c.lead), da = make_buf(n, &add), dw = make_buf(H, &w);
    Buf dout = make_buf(R * H);
    cuda_model::add_rmsnorm(dx.ptr(), c.form == 1 ? nullptr : da.ptr(), dw.ptr(), eps,
                            dout.ptr(), c.form == 2 ? drows.ptr<const int32_t>() : nullptr, R,
                            H, nullptr);
    return std::make_pair(dx.get(), dout.get());
  };
  const auto [old, now] = legacy_and_new(run);
  EXPECT_EQ(count_diff(old.first, now.first), 0) << "x differs from the legacy kernel's";
  EXPECT_EQ(count_diff(old.second, now.second), 0) << "out differs from the legacy kernel's";

  // x: written back as bf16(x + add) in form 0, untouched otherwise.
  Bits want_x = x;
  if (c.form == 0) {
    for (int64_t i = 0; i < n; ++i) want_x[i] = f2bf(bf2f(x[i]) + bf2f(add[i]));
  }
  EXPECT_EQ(count_diff(now.first, want_x), 0) << "x is not what the form leaves there";
  std::vector<double> v(R * H);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t src = c.form == 2 ? rows[r] : r;
    for (int64_t i = 0; i < H; ++i) {
      const int64_t j = src * H + i;
      v[r * H + i] = c.form == 1 ? bf2f(x[j]) : bf2f(f2bf(bf2f(x[j]) + bf2f(add[j])));
    }
  }
  double worst = 0.0;
  EXPECT_EQ(rmsnorm_errors(v, w, now.second, R, H, eps, &worst), 0)
      << "outputs outside the bound of the float64 model (worst " << worst << " x the bound)";
}

std::vector<int64_t> token_counts() {
  if (quick()) return {1, 7, 33};
  return {1, 7, 4096, 4097};
}

TEST(RowKernels, AddRmsnormMatchesLegacyAndFloat64) {
  for (int64_t H : {576, 1024, 4096, 64, 2560, 100, 8192}) {
    for (int64_t T : token_counts()) {
      if (H == 8192 && T > 7) continue;  // the legacy fallback: small cases say enough
      for (int form : {0, 1, 2}) {
        run_norm_case(NormCase{T, H, form, 0}, test::case_seed());
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  run_norm_case(NormCase{7, 1024, 0, 1}, test::case_seed());  // misaligned x
}

TEST(RowKernels, EmbedAndEmbedRmsnormMatchLegacyAndFloat64) {
  for (int64_t H : {576, 1024, 4096, 64, 100}) {
    for (int64_t T : token_counts()) {
      const uint64_t seed = test::case_seed();
      std::ostringstream what;
      what << "T " << T << " H " << H;
      SCOPED_TRACE(test::case_note(0, seed, what.str()));
      std::mt19937_64 rng(seed);
      const int64_t V = 300, first = 40, num = 200;  // ids outside [40, 240) give zero rows
      const Bits table = random_bf16(rng, num * H, -3.0f, 3.0f), w = random_bf16(rng, H, 0.5f, 1.5f);
      std::vector<int32_t> ids(T);
      std::uniform_int_distribution<int32_t> pick(0, V - 1);
      for (auto& id : ids) id = pick(rng);
      const Tensor dids = upload_i32(ids);
      auto run = [&] {
        Buf dt = make_buf(num * H, &table), dw = make_buf(H, &w);
        Buf e = make_buf(T * H), x = make_buf(T * H), out = make_buf(T * H);
        cuda_model::embed(dt.ptr(), dids.ptr<const int32_t>(), T, H, first, num, e.ptr(), nullptr);
        cuda_model::embed_rmsnorm(dt.ptr(), dids.ptr<const int32_t>(), T, H, first, num, dw.ptr(),
                                  1e-6f, x.ptr(), out.ptr(), nullptr);
        return std::vector<Bits>{e.get(), x.get(), out.get()};
      };
      const auto [old, now] = legacy_and_new(run);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(count_diff(old[k], now[k]), 0) << "output " << k << " differs from legacy";
      }
      Bits want(T * H);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t local = ids[t] - first;
        for (int64_t i = 0; i < H; ++i) {
          want[t * H + i] = local >= 0 && local < num ? table[local * H + i] : f2bf(0.0f);
        }
      }
      EXPECT_EQ(count_diff(now[0], want), 0) << "embed rows differ from the table's";
      EXPECT_EQ(count_diff(now[1], want), 0) << "embed_rmsnorm's x differs from the table's";
      std::vector<double> v(T * H);
      for (int64_t i = 0; i < T * H; ++i) v[i] = bf2f(want[i]);
      // Zero rows: inv = 1 / sqrt(eps), out 0: within the bound.
      double worst = 0.0;
      EXPECT_EQ(rmsnorm_errors(v, w, now[2], T, H, 1e-6, &worst), 0)
          << "embed_rmsnorm outside the float64 bound (worst " << worst << " x)";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(RowKernels, SiluMulMatchesLegacyAndFloat64) {
  for (int64_t inter : {1536, 3072, 12288, 100}) {
    for (int64_t T : token_counts()) {
      if (inter == 12288 && T > 4096) continue;
      for (int64_t lead : {0, 1}) {
        if (lead == 1 && T != 7) continue;  // misaligned: the legacy fallback
        const uint64_t seed = test::case_seed();
        std::ostringstream what;
        what << "T " << T << " inter " << inter << " lead " << lead;
        SCOPED_TRACE(test::case_note(0, seed, what.str()));
        std::mt19937_64 rng(seed);
        const Bits gu = random_bf16(rng, T * 2 * inter, -8.0f, 8.0f);
        auto run = [&] {
          Buf dgu = make_buf(T * 2 * inter, &gu, lead), out = make_buf(T * inter);
          cuda_model::silu_mul(dgu.ptr(), T, inter, out.ptr(), nullptr);
          return out.get();
        };
        const auto [old, now] = legacy_and_new(run);
        EXPECT_EQ(count_diff(old, now), 0) << "silu_mul differs from the legacy kernel's";
        // Bound: silu rounds to bf16, the product too (2^-9 relative each), expf and the
        // division within a few ulp: 2^-7 |ref| + 1e-6.
        int64_t bad = 0;
        double worst = 0.0;
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < inter; ++i) {
            const double g = bf2f(gu[t * 2 * inter + i]), u = bf2f(gu[t * 2 * inter + inter + i]);
            const double ref = g / (1.0 + std::exp(-g)) * u;
            const double err = std::fabs(bf2f(now[t * inter + i]) - ref);
            const double tol = std::ldexp(std::fabs(ref), -7) + 1e-6;
            worst = std::max(worst, err / tol);
            bad += !(err <= tol);
          }
        }
        EXPECT_EQ(bad, 0) << "silu_mul outside the float64 bound (worst " << worst << " x)";
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(RowKernels, AddBiasMatchesLegacyAndIsExact) {
  // (n, ld): the qkv bias on the fused rows, the o bias, an odd width (legacy fallback).
  for (const auto& [n, ld] : std::vector<std::pair<int64_t, int64_t>>{
           {1024 + 2 * 128, 1024 + 2 * 128}, {896, 904}, {100, 101}}) {
    for (int64_t T : token_counts()) {
      const uint64_t seed = test::case_seed();
      std::ostringstream what;
      what << "T " << T << " n " << n << " ld " << ld;
      SCOPED_TRACE(test::case_note(0, seed, what.str()));
      std::mt19937_64 rng(seed);
      const Bits x = random_bf16(rng, T * ld, -3.0f, 3.0f), bias = random_bf16(rng, n, -1.0f, 1.0f);
      auto run = [&] {
        Buf dx = make_buf(T * ld, &x), db = make_buf(n, &bias);
        cuda_model::add_bias(dx.ptr(), ld, T, n, db.ptr(), nullptr);
        return dx.get();
      };
      const auto [old, now] = legacy_and_new(run);
      EXPECT_EQ(count_diff(old, now), 0) << "add_bias differs from the legacy kernel's";
      Bits want = x;  // columns past n untouched
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < n; ++i) {
          want[t * ld + i] = f2bf(bf2f(x[t * ld + i]) + bf2f(bias[i]));
        }
      }
      EXPECT_EQ(count_diff(now, want), 0) << "add_bias is not bf16(x + bias)";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
