// prefill_attention over float8_e4m3 paged caches on the GPU (part of
// kernels_prefill_gpu_test; see prefill_gpu_test.cpp): random sweeps against the CPU backend on
// the same codes, plain and with window / softcap / ALiBi and head_dim 64-256.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/tuning.h"
#include "kernels/gpu_test_support.h"
#include "kernels/prefill_gpu_case.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::prefill_gpu;  // NOLINT: the shared case helpers

// Paged prefill over float8_e4m3 caches: dtype x head_dims x causal, `per` cases each, with and
// without scales, against the CPU backend on the same codes; with `features`, a random window /
// softcap / ALiBi on each (add_random_features).
void fp8_paged_sweep(const std::vector<int64_t>& head_dims, int per, bool features,
                     const std::string& what) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : head_dims) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < per; ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, dt, d, causal, /*paged=*/true, quick);
          if (features) add_random_features(rng, c);
          c.fp8 = true;
          c.fp8_scales = index % 2 == 0;
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, what + " " + std::string(dtype_name(dt)));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The prefix-hit and chunked-prefill path of an fp8 engine.
TEST(PrefillGpu, Fp8PagedSweep) {
  fp8_paged_sweep({64, 128}, test::quick_mode() ? 1 : 3, false, "prefill paged fp8 cache");
}

// Paged float8_e4m3 caches with window / softcap / ALiBi and head_dim 64-256 (the extended
// kernel over fp8 codes; CudaTuning::fp8_extended_forms), with and without scales (k_scale
// folds into the modifiers' units: ScoreMods::fold_key_scale), against the CPU backend on the
// same codes.
TEST(PrefillGpuFeatures, Fp8PagedSweep) {
  const TuningRestore restore;
  cuda::cuda_tuning().fp8_extended_forms = 1;
  fp8_paged_sweep(kFeatureHeadDims, test::quick_mode() ? 1 : 2, true,
                  "prefill features paged fp8");
}

}  // namespace
}  // namespace kvattn
