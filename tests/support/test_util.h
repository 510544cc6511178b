// Shared test helpers: seeded random tensors, poisoning, error metrics, the GPU skip rule.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn::test {

// Exit code that ctest maps to "skipped" (SKIP_RETURN_CODE 77).
inline constexpr int kSkipReturnCode = 77;

// Each test case draws a fresh seed; print it on failure with SCOPED_TRACE(seed_note(seed)).
inline uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Fills a host tensor (any strides) of f32/bf16/f16 with uniform values in [lo, hi).
void fill_uniform(const TensorView& t, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f);
// Fills every byte of the tensor's memory span with 0xFF-style poison (NaN for floats).
void poison(const TensorView& t);
// Reads element `i` (flat, row-major over the logical shape) of a host float tensor as double.
double element(const TensorView& t, int64_t i);
// Copies a host float tensor of any strides into a dense row-major vector<double>.
std::vector<double> to_doubles(const TensorView& t);

struct ErrorStats {
  double rel_l2 = 0.0;   // ||out-ref|| / ||ref||
  double max_abs = 0.0;  // max |out-ref|
  bool has_nan = false;
};
ErrorStats compare(const std::vector<double>& out, const std::vector<double>& ref);

}  // namespace kvattn::test
