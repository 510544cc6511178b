// prefill_attention on the GPU against the CPU backend, on the same bf16/fp16 values (the CPU
// runs in float32 on upcast copies, so the reference carries no rounding of its own output).
// Random cases sweep dtype x head_dim x causal x packed/paged with odd batches (1, 3, 17),
// lengths 0/1/54/97/1000, prefixes (Lq < Lk), fewer keys than queries (rows that see nothing),
// GQA groups 1..8, page sizes 1/16/256/odd, random block tables, padded token and block strides,
// K and V in one allocation, NaN in every cache byte no sequence owns, poisoned outputs and
// guard checks around them. Plus a 32k context (checked on row windows), a batch of 256, bad
// block ids / lengths / cu_seqlens caught by the fault word, and the unsupported head_dim error.
// The PrefillGpuFeatures tests (issue 18) add sliding windows, softcap and ALiBi ([num_heads]
// and [num_seqs, num_heads]) over head_dim 64/80/96/128/256, with the same case discipline.
//
// This file: the core random sweep. The binary's other files (tests/kernels/CMakeLists.txt):
// prefill_gpu_schedule.cpp (the Hopper kernel's schedule under its cuda_tuning() forms: L2
// sections, the tile decode's width, the tile handover, the dynamic tile schedule, paged
// producer warps), prefill_gpu_fp8.cpp (float8_e4m3 caches), prefill_gpu_edges.cpp
// (hand-picked edge cases, tile edges, a 32k context, a batch of 256),
// prefill_gpu_features.cpp (window, softcap, ALiBi, head_dim 80/96/256, both kernels of a
// feature call), prefill_gpu_faults.cpp (bad indices, refusals); the shared case, its run and
// its check: prefill_gpu_case.h.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "kernels/gpu_test_support.h"
#include "kernels/prefill_gpu_case.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::prefill_gpu;  // NOLINT: the shared case helpers

TEST(PrefillGpu, RandomSweep) {
  const bool quick = test::quick_mode();
  const int per_combo = quick ? 1 : 3;
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        for (bool paged : {false, true}) {
          for (int i = 0; i < per_combo; ++i, ++index) {
            if (!test::case_selected(index)) continue;
            const uint64_t seed = test::case_seed();
            std::mt19937_64 rng(seed);
            const PrefillCase c = random_case(rng, dt, d, causal, paged, quick);
            SCOPED_TRACE(test::case_note(index, seed, c.describe()));
            run_case(c, rng, std::string("prefill ") + (paged ? "paged " : "packed ") +
                                 std::string(dtype_name(dt)));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
