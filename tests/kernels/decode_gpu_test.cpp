// decode_attention on the GPU against the float64 reference and the CPU backend, on random
// paged caches (non-identity block tables, NaN in every slot no sequence owns, block strides
// wider than a block), with poisoned outputs, across page sizes, GQA groups, head dims,
// dtypes, q_len > 1, empty sequences, split plans and non-contiguous q/out. Also: bad block
// ids and lengths are caught by the fault word without touching memory out of bounds, and a
// CUDA-graph capture of one decode replays to the same result.
//
// This file: the core sweep, under the default tuning and every cuda_tuning() variant, and the
// planner's kernel choices (moderate batches, the uniform-lengths promise). The binary's other
// files (tests/kernels/CMakeLists.txt): decode_gpu_fp8.cpp (float8_e4m3 caches),
// decode_gpu_edges.cpp (shapes at the edges, the TMA copy issue), decode_gpu_features.cpp
// (window, softcap, ALiBi, cache_leftpad), decode_gpu_launch.cpp (stream waves, the dynamic
// split, CUDA graphs, programmatic launch), decode_gpu_faults.cpp (bad indices, refusals); the
// shared case, its run and its check: decode_gpu_case.h.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/decode/decode_host.h"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

TEST(DecodeGpu, SweepAgainstReferenceAndCpu) { sweep(test::quick_mode() ? 12 : 96); }

// Every variant computes the same thing (the default is covered above).
TEST(DecodeGpuVariants, Sweep) { sweep_each(kVariants, 3); }

// Moderate batches, where the planner's thresholds decide between the small and the stream
// kernel (units around one wave of the SMs; session 21's map): one CTA a unit in one wave
// (decode_small_one_wave, decode_small_min_chunks 1), the d64 bound on the small kernel, each
// against the references, over plans for the table's width (as an engine's graphs plan) and
// for the batch's longest length.
TEST(DecodeGpu, ModerateBatchesAcrossKernelChoices) {
  const bool quick = test::quick_mode();
  const Variant forms[] = {{.name = "rule", .heads = 8, .stages = 0},
                           {.name = "one wave", .heads = 8, .stages = 0, .one_wave = 1},
                           {.name = "min chunks 1", .heads = 8, .stages = 0, .min_chunks = 1},
                           {.name = "d64 bound 1 MiB", .heads = 8, .stages = 0, .d64_max_mb = 1}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 4 : 12); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.d = c % 2 ? 64 : 128;
      dc.dt = c % 3 ? DType::kBF16 : DType::kF16;
      dc.hkv = pick(rng, std::vector<int64_t>{3, 4, 8});
      dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4});
      dc.bs = pick(rng, std::vector<int64_t>{16, 64});
      // 16 .. 48 sequences: 48 .. 384 units, around one wave at one chunk a unit
      const int64_t B = uniform_int(rng, 16, 48);
      dc.lens = random_lens(rng, B, quick ? 600 : 3000, true);
      dc.plan_mode = c % 4 < 2 ? 1 : 3;  // the table's width, or the longest length
      dc.with_lse = c % 3 != 2;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
}

// The caller's promise of uniform lengths (DecodePlan::uniform_lengths): batches whose units fill
// a wave of 4-warp CTAs at >= 16 tiles a warp (decode_uniform_one_chunk) take one small-kernel
// CTA a (sequence, unit) without a merge; the promise kept (uniform lengths, around the tile
// and page edges) and broken (ragged lengths under the same plan), head_dim 128 where the rule
// applies and 64 where it must not, GQA 1-8, bf16 and fp16, against the references.
TEST(DecodeGpu, UniformLengthsPromise) {
  const bool quick = test::quick_mode();
  const int device = 0;
  for (int c = 0; c < (quick ? 6 : 16); ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc;
    dc.d = c % 4 == 3 ? 64 : 128;
    dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
    dc.hkv = pick(rng, std::vector<int64_t>{4, 8});
    dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 8});
    dc.bs = pick(rng, std::vector<int64_t>{16, 64, 48});
    // Units past three 4-warp CTAs an SM (two fit at head_dim 128), >= 16 tiles a warp.
    const int64_t units = dc.hkv * ((dc.group + 15) / 16);
    const int64_t B = (int64_t{kvattn::cuda::sm_count(device)} * 3 + units - 1) / units +
                      uniform_int(rng, 0, 8);
    const int64_t L = pick(rng, std::vector<int64_t>{1024, 1025, 1039, 1040, 1500});
    dc.lens.assign(static_cast<size_t>(B), L);
    const bool broken = c % 3 == 2;
    if (broken) {  // ragged lengths under the uniform plan for L
      for (auto& l : dc.lens) l = uniform_int(rng, 0, L);
      dc.lens[0] = L;
    }
    dc.plan_mode = 5;
    dc.with_lse = c % 2 == 0;
    // The rule takes it where the tuning lets it (on by default; KVATTN_DECODE_UNIFORM_ONE_CHUNK=0
    // turns it off, and the cases then check the split kernel under the promise).
    if (!broken && dc.d == 128 && kvattn::cuda::cuda_tuning().decode_uniform_one_chunk != 0) {
      EXPECT_EQ(kvattn::cuda::decode_small_chunks(device, B, dc.hkv, dc.group, dc.d, L, true), 1)
          << "B " << B << " hkv " << dc.hkv << " group " << dc.group << " L " << L;
    }
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()) + (broken ? " (promise broken)" : ""));
    check(dc, run_case(dc, rng));
  }
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
