#include "support/case_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace kvattn::test {
namespace {

struct Worst {
  int cases = 0;
  double rel_l2 = 0.0, max_abs = 0.0, lse_max_abs = -1.0, lse_max_scaled = -1.0;
  bool nan = false;
};

std::mutex& summary_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Worst>& summary() {
  static std::map<std::string, Worst> s;
  return s;
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(summary_mutex());
    if (summary().empty()) return;
    std::printf("\n==== error summary (worst over cases, vs float64 reference) ====\n");
    for (const auto& [key, w] : summary()) {
      std::printf("  %-40s cases %4d  rel_l2 %.3e  max_abs %.3e", key.c_str(), w.cases, w.rel_l2,
                  w.max_abs);
      if (w.lse_max_abs >= 0) {
        std::printf("  lse_max_abs %.3e (rel %.1e)", w.lse_max_abs, w.lse_max_scaled);
      }
      if (w.nan) std::printf("  NaN SEEN");
      std::printf("\n");
    }
    std::fflush(stdout);
  }
};

[[maybe_unused]] ::testing::Environment* const kSummaryEnv =
    ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace

uint64_t case_seed() {
  if (const char* s = env("KVATTN_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return fresh_seed();
}

bool case_selected(int index) {
  const char* s = env("KVATTN_TEST_CASE");
  return s == nullptr || std::atoi(s) == index;
}

std::string case_note(int index, uint64_t seed, const std::string& what) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "case %d seed 0x%016" PRIx64 ": ", index, seed);
  return buf + what;
}

RowBuffer make_rows(int64_t rows, int64_t heads, int64_t dim, DType dtype, int64_t pad,
                    int64_t lead) {
  const int64_t row = heads * dim + pad;
  RowBuffer b;
  b.storage = Tensor::empty({lead + rows * row + pad}, dtype);
  std::memset(b.storage.data(), 0xFF, static_cast<size_t>(b.storage.nbytes()));
  b.view = TensorView(static_cast<char*>(b.storage.data()) + lead * dtype_size(dtype), dtype,
                      Device::cpu(), {rows, heads, dim}, {row, dim, 1});
  return b;
}

bool untouched_outside(const Tensor& storage, const TensorView& view, uint8_t byte) {
  const auto* base = static_cast<const uint8_t*>(storage.data());
  const int64_t n = storage.nbytes();
  std::vector<bool> covered(static_cast<size_t>(n), false);
  const int64_t es = dtype_size(view.dtype);
  std::vector<int64_t> idx(view.ndim, 0);
  const int64_t count = view.numel();
  for (int64_t e = 0; e < count; ++e) {
    int64_t off = 0;
    for (int d = 0; d < view.ndim; ++d) off += idx[d] * view.strides[d];
    const int64_t byte_off = static_cast<const uint8_t*>(view.data) - base + off * es;
    for (int64_t k = 0; k < es; ++k) {
      if (byte_off + k >= 0 && byte_off + k < n) covered[static_cast<size_t>(byte_off + k)] = true;
    }
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++idx[d] < view.shape[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!covered[static_cast<size_t>(i)] && base[i] != byte) return false;
  }
  return true;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

void fill_random(const TensorView& t, std::mt19937_64& rng, float lo, float hi) {
  if (t.numel() == 0) return;
  uint64_t state = rng();
  const float span = hi - lo;
  const auto next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + span * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  };
  const int last = t.ndim - 1;
  const int64_t inner = t.ndim ? t.shape[last] : 1;
  const int64_t inner_stride = t.ndim ? t.strides[last] : 1;
  const int64_t outer = inner ? t.numel() / inner : 0;
  std::vector<int64_t> idx(t.ndim > 0 ? t.ndim - 1 : 0, 0);
  const int64_t es = dtype_size(t.dtype);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (int d = 0; d < last; ++d) off += idx[d] * t.strides[d];
    char* row = static_cast<char*>(t.data) + off * es;
    for (int64_t i = 0; i < inner; ++i) {
      char* p = row + i * inner_stride * es;
      const float v = next();
      switch (t.dtype) {
        case DType::kF32: std::memcpy(p, &v, 4); break;
        case DType::kBF16: { const bf16_t b = float_to_bf16(v); std::memcpy(p, &b, 2); break; }
        case DType::kF16: { const f16_t h = float_to_f16(v); std::memcpy(p, &h, 2); break; }
        case DType::kF8E4M3: *reinterpret_cast<uint8_t*>(p) = float_to_e4m3(v); break;
        default: std::abort();
      }
    }
    for (int d = last - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

Tensor int_tensor(const std::vector<int64_t>& values, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kI32) {
      t.ptr<int32_t>()[i] = static_cast<int32_t>(values[i]);
    } else {
      t.ptr<int64_t>()[i] = values[i];
    }
  }
  return t;
}

Tensor int_tensor_2d(const std::vector<int64_t>& values, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32);
  for (int64_t i = 0; i < rows * cols; ++i) t.ptr<int32_t>()[i] = static_cast<int32_t>(values[i]);
  return t;
}

LseStats compare_lse(const std::vector<double>& out, const std::vector<double>& ref) {
  LseStats s;
  if (out.size() != ref.size()) {
    s.ok = false;
    return s;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i])) {
      s.ok = false;
    } else if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i]) s.ok = false;
    } else {
      s.max_abs = std::max(s.max_abs, std::abs(out[i] - ref[i]));
      s.max_scaled =
          std::max(s.max_scaled, std::abs(out[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
    }
  }
  return s;
}

void record_error(const std::string& key, const ErrorStats& s, double lse_max_abs,
                  double lse_max_scaled) {
  std::lock_guard<std::mutex> lock(summary_mutex());
  Worst& w = summary()[key];
  ++w.cases;
  if (s.has_nan || std::isnan(s.rel_l2)) w.nan = true;
  if (!std::isnan(s.rel_l2)) w.rel_l2 = std::max(w.rel_l2, s.rel_l2);
  w.max_abs = std::max(w.max_abs, s.max_abs);
  w.lse_max_abs = std::max(w.lse_max_abs, lse_max_abs);
  w.lse_max_scaled = std::max(w.lse_max_scaled, lse_max_scaled);
}

double rel_l2_tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

void expect_attention_close(const RefAttention& ref, const TensorView& out, const TensorView& lse,
                            const std::string& key, const std::string& label) {
  const std::vector<double> got = to_doubles(out);
  const ErrorStats s = compare(got, ref.out);
  const double tol = rel_l2_tolerance(out.dtype);
  EXPECT_FALSE(s.has_nan) << "NaN in the output (or a size mismatch)";
  EXPECT_LT(s.rel_l2, tol) << "rel L2 error " << s.rel_l2 << " max abs " << s.max_abs;

  // Rows that see no key must be exactly zero.
  const int64_t total_q = out.size(0), H = out.size(1), D = out.size(2);
  int64_t bad_zero_rows = 0;
  for (int64_t i = 0; i < total_q; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      if (!std::isinf(ref.lse[static_cast<size_t>(h * total_q + i)])) continue;
      for (int64_t d = 0; d < D; ++d) {
        if (got[static_cast<size_t>((i * H + h) * D + d)] != 0.0) {
          if (++bad_zero_rows <= 3) {
            ADD_FAILURE() << "row " << i << " head " << h << " sees no key but out[" << d
                          << "] = " << got[static_cast<size_t>((i * H + h) * D + d)];
          }
          break;
        }
      }
    }
  }
  EXPECT_EQ(bad_zero_rows, 0) << "rows that see no key must output zeros";

  double lse_abs = -1.0, lse_scaled = -1.0;
  if (lse.defined()) {
    const std::vector<double> got_lse = to_doubles(lse);
    const LseStats ls = compare_lse(got_lse, ref.lse);
    EXPECT_TRUE(ls.ok) << "lse has NaN, or -inf where the reference is finite (or vice versa)";
    lse_abs = ls.max_abs;
    lse_scaled = ls.max_scaled;
    int64_t bad = 0;
    for (size_t i = 0; i < got_lse.size() && i < ref.lse.size(); ++i) {
      if (!std::isfinite(ref.lse[i])) continue;
      const double err = std::abs(got_lse[i] - ref.lse[i]);
      if (!(err <= kLseTolerance * std::max(1.0, std::abs(ref.lse[i]))) && ++bad <= 3) {
        ADD_FAILURE() << "lse[" << i / static_cast<size_t>(std::max<int64_t>(total_q, 1))
                      << "][" << i % static_cast<size_t>(std::max<int64_t>(total_q, 1))
                      << "] = " << got_lse[i] << " but the reference is " << ref.lse[i];
      }
    }
    EXPECT_EQ(bad, 0) << "lse entries off by more than " << kLseTolerance << " * max(1, |lse|)";
  }
  std::printf("  %-34s rel_l2 %.2e  max_abs %.2e", label.c_str(), s.rel_l2, s.max_abs);
  if (lse_abs >= 0) std::printf("  lse_abs %.2e", lse_abs);
  std::printf("\n");
  record_error(key, s, lse_abs, lse_scaled);
}

}  // namespace kvattn::test
