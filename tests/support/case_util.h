// Helpers for the random-case sweeps: reproducible seeds, case selection, strided buffers with
// poisoned gaps, LSE comparison and the per-binary error summary.
//
// Reproducing a failure: every case prints its seed (SCOPED_TRACE). Rerun the binary with
//   KVATTN_TEST_SEED=<seed> KVATTN_TEST_CASE=<index> ./kernels_prefill_attention_test
//       --gtest_filter=<test>
// to run only that case with that seed (the case index picks the structured part of the
// configuration, the seed the random part).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Number of random cases to run: `release` normally, fewer under the sanitizers.
inline int case_count(int release, int sanitized) { return kSanitized ? sanitized : release; }

// The seed of one case: fresh_seed(), or KVATTN_TEST_SEED when set.
uint64_t case_seed();
// True when case `index` should run (KVATTN_TEST_CASE unset, or equal to index).
bool case_selected(int index);

// "case 12 seed 0x1234...: <what>" for SCOPED_TRACE.
std::string case_note(int index, uint64_t seed, const std::string& what);

// A buffer of rows [rows, heads, dim] whose token stride is heads*dim + pad (pad >= 0), plus
// `lead` elements before the first row. The whole buffer is poisoned (0xFF bytes) at creation.
struct RowBuffer {
  Tensor storage;  // flat, dtype elements
  TensorView view;
};
RowBuffer make_rows(int64_t rows, int64_t heads, int64_t dim, DType dtype, int64_t pad,
                    int64_t lead = 0);

// True when every byte of `storage` outside the elements of `view` still holds `byte`.
bool untouched_outside(const Tensor& storage, const TensorView& view, uint8_t byte = 0xFF);

// Raw bytes of a tensor's storage.
std::vector<uint8_t> bytes_of(const Tensor& t);

// Uniform random int in [lo, hi].
inline int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[static_cast<size_t>(uniform_int(rng, 0, static_cast<int64_t>(v.size()) - 1))];
}

// Like fill_uniform (f32/bf16/f16, any strides) but several times faster, for the large
// inputs of the sweeps: a splitmix64 stream seeded from `rng`.
void fill_random(const TensorView& t, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f);

// Int32 tensor holding `values`.
Tensor int_tensor(const std::vector<int64_t>& values, DType dtype = DType::kI32);
Tensor int_tensor_2d(const std::vector<int64_t>& values, int64_t rows, int64_t cols);

// LSE comparison: -inf must match -inf exactly; finite entries give max_abs; NaN never passes.
struct LseStats {
  double max_abs = 0.0;
  double max_scaled = 0.0;  // max |out - ref| / max(1, |ref|)
  bool ok = true;  // false on NaN, or -inf on one side only
};
LseStats compare_lse(const std::vector<double>& out, const std::vector<double>& ref);

// Collects the worst errors per key (e.g. "prefill paged bf16") and prints one summary line per
// key to stdout after all tests ran.
void record_error(const std::string& key, const ErrorStats& s, double lse_max_abs = -1.0,
                  double lse_max_scaled = -1.0);

// Tolerances (DESIGN §5): relative L2 error vs the float64 reference.
double rel_l2_tolerance(DType dtype);  // 1e-5 for float32, 1e-2 for bf16/fp16
// LSE: |lse - ref| <= 3e-5 * max(1, |ref|) (float32 arithmetic for every input dtype; the
// worst seen over thousands of cases is ~4e-6, on head_dim 256 with a large scale).
inline constexpr double kLseTolerance = 3e-5;

// Checks an attention output (and lse, when defined) against the reference with gtest
// EXPECTs: rel L2 below the dtype's tolerance, no NaN, rows that see no key exactly zero,
// lse -inf exactly where the reference's is and close elsewhere. Prints one line with the
// errors and records them under `key` for the end-of-run summary.
void expect_attention_close(const RefAttention& ref, const TensorView& out, const TensorView& lse,
                            const std::string& key, const std::string& label);

}  // namespace kvattn::test
