// Shared by the merge_attention_states tests (CPU: merge_attention_test, CUDA:
// merge_attention_gpu_test): random lse pairs of every kind (one or both sides -inf, far apart,
// huge), NaN in the rows a -inf side must not read, the float64 reference and the tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kvattn/core/tensor.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn::test::merge {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// A random lse pair of one row: which kind is drawn per row.
inline void draw_lse_pair(std::mt19937_64& rng, float& la, float& lb) {
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  const int kind = static_cast<int>(test::uniform_int(rng, 0, 99));
  la = u(rng);
  lb = u(rng);
  if (kind < 10) {
    la = -kInfF;
  } else if (kind < 20) {
    lb = -kInfF;
  } else if (kind < 25) {
    la = lb = -kInfF;
  } else if (kind < 40) {  // far apart: exp(+-80..100) overflows / underflows in float32
    lb = la + test::pick(rng, std::vector<float>{80.0f, -80.0f, 100.0f, -100.0f, 88.5f, -88.5f});
  } else if (kind < 50) {  // huge magnitudes, close together
    la = test::pick(rng, std::vector<float>{1e4f, -1e4f, 3e5f, -3e5f});
    lb = la + u(rng) * 0.1f;
  } else if (kind < 55) {
    lb = la;
  }
}

// Half of the rows whose lse is -inf hold NaN: a side that saw no key must not be read.
inline void poison_unseen_rows(std::mt19937_64& rng, const TensorView& rows, const Tensor& lse) {
  const int64_t tokens = rows.size(0), heads = rows.size(1), d = rows.size(2);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      if (lse.ptr<float>()[h * tokens + t] != -kInfF || test::uniform_int(rng, 0, 1) == 0) continue;
      char* row = static_cast<char*>(rows.data) +
                  (t * rows.stride(0) + h * d) * dtype_size(rows.dtype);
      test::poison(TensorView(row, rows.dtype, Device::cpu(), {d}));
    }
  }
}

struct Ref {
  std::vector<double> out;  // [tokens, heads, d] dense
  std::vector<double> lse;  // [heads, tokens]
};

// float64: lse = log(exp(la) + exp(lb)), out = oa exp(la - lse) + ob exp(lb - lse); a -inf side
// contributes nothing.
inline Ref reference(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
              const TensorView& lse_b) {
  const int64_t tokens = out_a.size(0), heads = out_a.size(1), d = out_a.size(2);
  const std::vector<double> oa = test::to_doubles(out_a), ob = test::to_doubles(out_b);
  const std::vector<double> la = test::to_doubles(lse_a), lb = test::to_doubles(lse_b);
  Ref r;
  r.out.assign(oa.size(), 0.0);
  r.lse.assign(la.size(), -kInf);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t li = static_cast<size_t>(h * tokens + t);
      const double x = la[li], y = lb[li];
      if (x == -kInf && y == -kInf) continue;
      const double m = std::max(x, y);
      const double lse = m + std::log(std::exp(x - m) + std::exp(y - m));
      const double wa = x == -kInf ? 0.0 : std::exp(x - lse);
      const double wb = y == -kInf ? 0.0 : std::exp(y - lse);
      r.lse[li] = lse;
      for (int64_t e = 0; e < d; ++e) {
        const size_t i = static_cast<size_t>((t * heads + h) * d + e);
        r.out[i] = (wa > 0 ? oa[i] * wa : 0.0) + (wb > 0 ? ob[i] * wb : 0.0);
      }
    }
  }
  return r;
}

// The largest |out - ref| a correct result can have: the output's rounding (|out| < 4).
inline double max_abs_tolerance(DType dt) {
  return dt == DType::kF32 ? 2e-6 : (dt == DType::kF16 ? 2e-3 : 1.6e-2);
}

}  // namespace kvattn::test::merge
