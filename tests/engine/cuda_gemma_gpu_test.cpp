// The CUDA model's Gemma kernels (engine/model/cuda_gemma.h) against a host float32 reference
// that rounds where they do: Gemma's RMSNorm with float32 (1 + w) weights, rounded once; the
// embedding scale; the sandwich norm + residual add + next norm (and Gemma 1's plain residual
// add + norm, w_add null); GeGLU; the final logit
// soft-cap. The device's rsqrtf / tanhf and its reduction order differ from the host's by a
// few float32 ulps, so a bf16 output may round the other way: outputs within 2 bf16 ulps
// (and values that only pass through one rounding of the same float expression, exact). The
// rows form of gemma_norm_add_rmsnorm must equal the all-rows form bit for bit and leave x
// alone. Written without a GPU. Exits 77 without a CUDA device (or without the CUDA backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/core/dtype.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_gemma.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

namespace k = cuda_model;

#define T_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

float bf(float v) { return bf16_to_float(float_to_bf16(v)); }  // round through bf16

double ulp_bf16(double v) {
  v = std::fabs(v);
  if (v < std::ldexp(1.0, -126)) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, e - 1 - 7);
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<bf16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

std::vector<float> gemma_weights(size_t n, std::mt19937& rng) {  // 1 + w, w around 0
  std::normal_distribution<float> d(0.0f, 0.2f);
  std::vector<float> v(n);
  for (auto& x : v) x = 1.0f + d(rng);
  return v;
}

// Counts the elements outside `ulps` bf16 ulps and returns the largest distance in ulps. The
// ulp is taken at max(|got|, |ref|, mag[i]): mag (optional) is the size of the operands a
// result cancelled from (a residual add, 1 + tanh), whose last-bit differences it inherits.
double expect_close(const std::vector<bf16_t>& got, const std::vector<float>& ref, double ulps,
                    const char* what, const std::vector<float>& mag = {}) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]), r = ref[i];
    const double m = i < mag.size() ? std::fabs(mag[i]) : 0.0;
    const double d =
        std::fabs(g - r) / ulp_bf16(std::max({std::fabs(g), std::fabs(r), m}));
    if (!(d <= ulps)) {
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: " << g << " vs " << r;
    }
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  EXPECT_EQ(bad, 0u) << what;
  std::printf("%s: worst %.2f bf16 ulps over %zu values\n", what, worst, ref.size());
  return worst;
}

// Host reference: Gemma's norm of row `v` (float values) with weights w, before the rounding.
std::vector<float> gemma_norm(const std::vector<float>& v, const std::vector<float>& w,
                              float eps) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / v.size()) + eps);
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * inv * w[i];
  return o;
}

TEST(CudaGemma, ScaleRmsNorm) {
  std::mt19937 rng(1);
  for (const int64_t H : {32, 2304, 3840}) {
    const int64_t T = 5;
    const float eps = 1e-6f;
    const float scale = bf(std::sqrt(static_cast<float>(H)));
    const auto x0 = random_bf16(T * H, 0.05f, rng);
    const auto w = gemma_weights(H, rng);
    Dev<bf16_t> x(x0), out(std::vector<bf16_t>(T * H));
    Dev<float> dw(w);
    k::gemma_scale_rmsnorm(x.p, scale, dw.p, eps, out.p, T, H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    std::vector<float> xref(T * H), oref(T * H);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> row(H);
      for (int64_t i = 0; i < H; ++i) row[i] = xref[t * H + i] = bf(bf16_to_float(x0[t * H + i]) * scale);
      const auto o = gemma_norm(row, w, eps);
      for (int64_t i = 0; i < H; ++i) oref[t * H + i] = o[i];
    }
    expect_close(x.get(), xref, 0, ("scale H=" + std::to_string(H)).c_str());
    expect_close(out.get(), oref, 2, ("scale+norm H=" + std::to_string(H)).c_str());
  }
}

TEST(CudaGemma, NormAddNorm) {
  std::mt19937 rng(2);
  for (const int64_t H : {32, 2304, 5376}) {
    const int64_t T = 7;
    const float eps = 1e-6f;
    const auto x0 = random_bf16(T * H, 1.0f, rng);
    const auto a0 = random_bf16(T * H, 3.0f, rng);
    const auto w_add = gemma_weights(H, rng), w_out = gemma_weights(H, rng);
    Dev<bf16_t> x(x0), a(a0), out(std::vector<bf16_t>(T * H));
    Dev<float> dwa(w_add), dwo(w_out);
    k::gemma_norm_add_rmsnorm(x.p, a.p, dwa.p, dwo.p, eps, out.p, nullptr, T, H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    const auto x1 = x.get(), o1 = out.get();
    // xmag / omag: the operands' size (x + y may cancel; out inherits x's last bits).
    std::vector<float> xref(T * H), oref(T * H), xmag(T * H), omag(T * H);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> ar(H), s(H), m(H);
      for (int64_t i = 0; i < H; ++i) ar[i] = bf16_to_float(a0[t * H + i]);
      const auto y = gemma_norm(ar, w_add, eps);
      for (int64_t i = 0; i < H; ++i) {
        const float xv = bf16_to_float(x0[t * H + i]);
        s[i] = xref[t * H + i] = bf(xv + bf(y[i]));
        m[i] = xmag[t * H + i] = std::max(std::fabs(xv), std::fabs(y[i]));
      }
      const auto o = gemma_norm(s, w_out, eps);
      double ss = 0;
      for (float v : s) ss += static_cast<double>(v) * v;
      const double inv = 1.0 / std::sqrt(ss / H + eps);  // s's inverse RMS
      for (int64_t i = 0; i < H; ++i) {
        oref[t * H + i] = o[i];
        omag[t * H + i] = static_cast<float>(std::fabs(m[i] * inv * w_out[i]));
      }
    }
    const std::string h = " H=" + std::to_string(H);
    expect_close(x1, xref, 2, ("norm+add x" + h).c_str(), xmag);
    expect_close(o1, oref, 3, ("norm+add+norm out" + h).c_str(), omag);

    // The logit-rows form (rows 6, 0, 3): the same out rows, bit for bit; x untouched.
    const std::vector<int32_t> rows = {6, 0, 3};
    Dev<bf16_t> x2(x0), out2(std::vector<bf16_t>(rows.size() * H));
    Dev<int32_t> drows(rows);
    k::gemma_norm_add_rmsnorm(x2.p, a.p, dwa.p, dwo.p, eps, out2.p, drows.p,
                              static_cast<int64_t>(rows.size()), H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    const auto x2h = x2.get(), o2 = out2.get();
    for (size_t i = 0; i < x0.size(); ++i) ASSERT_EQ(x2h[i].bits, x0[i].bits) << "x written" << h;
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int64_t i = 0; i < H; ++i) {
        ASSERT_EQ(o2[r * H + i].bits, o1[rows[r] * H + i].bits) << "row " << rows[r] << h;
      }
    }

    // out = null: x only, the same bytes.
    Dev<bf16_t> x3(x0);
    k::gemma_norm_add_rmsnorm(x3.p, a.p, dwa.p, nullptr, eps, nullptr, nullptr, T, H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    const auto x3h = x3.get();
    for (size_t i = 0; i < x1.size(); ++i) ASSERT_EQ(x3h[i].bits, x1[i].bits) << "x only" << h;
  }
}

// Gemma 1 (no sandwich norms): w_add null adds the row as it is, s = bf16(x + a) exactly as
// HF's bf16 residual add; then Gemma's norm of s. The rows form again equals the all-rows form.
TEST(CudaGemma, PlainAddNorm) {
  std::mt19937 rng(4);
  for (const int64_t H : {32, 3072}) {
    const int64_t T = 6;
    const float eps = 1e-6f;
    const auto x0 = random_bf16(T * H, 1.0f, rng);
    const auto a0 = random_bf16(T * H, 3.0f, rng);
    const auto w_out = gemma_weights(H, rng);
    Dev<bf16_t> x(x0), a(a0), out(std::vector<bf16_t>(T * H));
    Dev<float> dwo(w_out);
    k::gemma_norm_add_rmsnorm(x.p, a.p, nullptr, dwo.p, eps, out.p, nullptr, T, H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    const auto x1 = x.get(), o1 = out.get();
    std::vector<float> xref(T * H), oref(T * H);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> s(H);
      for (int64_t i = 0; i < H; ++i) {
        s[i] = xref[t * H + i] =
            bf(bf16_to_float(x0[t * H + i]) + bf16_to_float(a0[t * H + i]));
      }
      const auto o = gemma_norm(s, w_out, eps);
      for (int64_t i = 0; i < H; ++i) oref[t * H + i] = o[i];
    }
    const std::string h = " H=" + std::to_string(H);
    expect_close(x1, xref, 0, ("plain add x" + h).c_str());  // one rounding of the same sum
    expect_close(o1, oref, 2, ("plain add+norm out" + h).c_str());

    const std::vector<int32_t> rows = {5, 1};
    Dev<bf16_t> x2(x0), out2(std::vector<bf16_t>(rows.size() * H));
    Dev<int32_t> drows(rows);
    k::gemma_norm_add_rmsnorm(x2.p, a.p, nullptr, dwo.p, eps, out2.p, drows.p,
                              static_cast<int64_t>(rows.size()), H, nullptr);
    T_CUDA(cudaDeviceSynchronize());
    const auto x2h = x2.get(), o2 = out2.get();
    for (size_t i = 0; i < x0.size(); ++i) ASSERT_EQ(x2h[i].bits, x0[i].bits) << "x written" << h;
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int64_t i = 0; i < H; ++i) {
        ASSERT_EQ(o2[r * H + i].bits, o1[rows[r] * H + i].bits) << "row " << rows[r] << h;
      }
    }
  }
}

TEST(CudaGemma, GeluTanhMul) {
  std::mt19937 rng(3);
  const int64_t T = 9, inter = 1000;
  const auto gu = random_bf16(T * 2 * inter, 2.0f, rng);
  Dev<bf16_t> dgu(gu), out(std::vector<bf16_t>(T * inter));
  k::gelu_tanh_mul(dgu.p, T, inter, out.p, nullptr);
  T_CUDA(cudaDeviceSynchronize());
  // mag: 1 + tanh cancels for gate < -3 (tanhf's last bits are then a large share of it).
  std::vector<float> ref(T * inter), mag(T * inter);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < inter; ++i) {
      const float g = bf16_to_float(gu[t * 2 * inter + i]);
      const float u = bf16_to_float(gu[t * 2 * inter + inter + i]);
      const float inner = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
      ref[t * inter + i] = bf(0.5f * g * (1.0f + std::tanh(inner))) * u;
      mag[t * inter + i] = 0.5f * g * u * 1e-5f;
    }
  }
  expect_close(out.get(), ref, 2, "gelu_tanh_mul", mag);
}

TEST(CudaGemma, SoftcapLogits) {
  std::mt19937 rng(4);
  const int64_t rows = 4, cols = 1000, ld = 1024;
  const float cap = 30.0f;
  const auto l0 = random_bf16(rows * ld, 40.0f, rng);
  Dev<bf16_t> l(l0);
  k::softcap_logits(l.p, ld, rows, cols, cap, nullptr);
  T_CUDA(cudaDeviceSynchronize());
  const auto got = l.get();
  std::vector<bf16_t> in_cols;
  std::vector<float> ref;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c) {
      const size_t i = r * ld + c;
      if (c >= cols) {
        ASSERT_EQ(got[i].bits, l0[i].bits) << "column " << c << " past cols was written";
        continue;
      }
      in_cols.push_back(got[i]);
      ref.push_back(cap * std::tanh(bf16_to_float(l0[i]) / cap));
    }
  }
  expect_close(in_cols, ref, 2, "softcap_logits");
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
