// Shared by the decode_attention GPU tests, one binary (kernels_decode_gpu_test) built from
// decode_gpu_test.cpp and the decode_gpu_*.cpp beside it (tests/kernels/CMakeLists.txt): one
// random paged case (DecodeCase) run through the float64 reference, the CPU backend and the GPU
// on the same inputs (run_case) and checked against both (check), the caches' 16-byte aligned
// and float8_e4m3 layouts, the random sweep, and the cuda_tuning() variants the suites run it
// under (Variant, kVariants, UseVariant, sweep_each).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"
#include "kernels/cuda/tuning.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/test_util.h"

namespace kvattn::test::decode_gpu {

inline const Device kGpu = Device::cuda(0);

struct DecodeCase {
  DType dt = DType::kBF16;
  int64_t d = 128, bs = 16, hkv = 2, group = 4, q_len = 1;
  std::vector<int64_t> lens;
  bool causal = true;
  // 0: library plan; 1: plan_decode for the capacity + own workspace; 2: forced splits;
  // 3: plan_decode for the batch's longest length (the small kernel's guess is right for it);
  // 4: plan_decode for half that (an understated bound: every guess wrong, still correct);
  // 5: plan_decode for the longest length with uniform_lengths (a promise that ragged lengths
  // break: still correct).
  int plan_mode = 0;
  int forced_splits = 1;
  bool aligned_cache = true;  // 16-byte aligned layout (fast path) or the generator's layout
  int64_t q_pad = 0, out_pad = 0;
  bool with_lse = true;
  float q_range = 1.0f;
  float scale = 0.0f;
  // float8_e4m3 caches: the 16-bit caches quantised with per-KV-head scales (0: none given,
  // i.e. 1.0; else random in [fp8_scale / 8, fp8_scale]).
  bool fp8 = false;
  float fp8_scale = 0.0f;
  // Issue 18's options (the extended kernels): window_size, softcap, ALiBi (0: none, 1:
  // [num_heads], 2: [num_seqs, num_heads]); poison_left >= 0: the block-table entries of the
  // pages entirely before key len - q_len - poison_left of each sequence hold bad ids on the
  // GPU (the CPU and the references see the good table).
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int alibi = 0;
  int64_t poison_left = -1;
  // cache_leftpad (empty: none): sequence b's keys start at cache position leftpad[b].
  // poison_pad: the block-table entries of the pages entirely before each pad hold bad ids on
  // the GPU. bad_pad >= 0: the GPU sees cache_leftpad[bad_pad] = len + 7 (out of range; the
  // kernel clamps it to len and records kFaultLeftpadOutOfRange), the CPU and the references
  // the clamped value.
  std::vector<int64_t> leftpad;
  bool poison_pad = false;
  int bad_pad = -1;

  std::string describe() const;
};

// The generator's caches moved into a 16-byte aligned layout (same block ids and contents).
struct Relaid {
  Tensor storage;
  TensorView k, v;
};
Relaid relayout_aligned(std::mt19937_64& rng, const test::PagedKv& kv);

// The float8_e4m3 form of a 16-bit paged case: the same blocks, quantised with a scale per KV
// head (store_kv's rule, core/fp8.h), in fresh storage laid out [num_blocks, block_size,
// Hkv, D] with `pad` bytes after each block (the block stride) and the caches starting
// `offset` bytes into it (1: not 16-byte aligned, the kernel's byte-load path); plus float32
// caches holding exactly what the kernel reads, e4m3(code) * scale.
struct Fp8Caches {
  Tensor storage, k_scale, v_scale;  // scales undefined when none are given
  TensorView k, v;
  Tensor k_ref, v_ref;  // float32, contiguous
};
Fp8Caches quantise_caches(std::mt19937_64& rng, const TensorView& k16, const TensorView& v16,
                          float max_scale, bool aligned);

struct Outcome {
  test::ErrorStats vs_ref, vs_cpu;
  test::ErrorStats fp8_vs_16bit;  // fp8 cases: against the reference on the 16-bit caches
  test::LseStats lse;
  bool untouched = true;
  uint32_t faults = 0;
};

// Runs one case: the float64 reference, the CPU backend and the GPU on the same inputs.
Outcome run_case(const DecodeCase& dc, std::mt19937_64& rng);

// The case's assertions: within 1e-2 (relative L2) of the reference and of the CPU backend, no
// NaN, the out buffer untouched outside its view, no fault but the one the case provokes, the
// LSE; and the errors recorded for the run's summary.
void check(const DecodeCase& dc, const Outcome& r);

// n random lengths up to max_len, 1, 54, 97 and 1000 (the page and tile edges) among them;
// about one in ten 0 where `zeros`.
std::vector<int64_t> random_lens(std::mt19937_64& rng, int64_t n, int64_t max_len, bool zeros);

// `cases` random cases of the core sweep (16-bit caches, or float8_e4m3 ones if `fp8`).
void sweep(int cases, bool fp8 = false);

// The kernel variants of cuda_tuning() (heads per CTA, stages, small-batch kernel on/off and
// its warps per CTA, interleaved and forced chunk counts, the swapped tile on/off). swap 1
// also puts fp8 caches on the swapped fp8 tile (head_dim 64/128, units of <= 8 rows;
// decode_use_swap), which is not their default, so the fp8 sweeps below cover both fp8 tiles:
// "swap nosmall" and "swap h4 s2" the swapped one, "noswap nosmall" and the rest the 16-row
// one.
struct Variant {
  const char* name;
  int heads, stages;
  int small = 1, small_warps = 0;  // 0: the library's choice
  int evict_first = -1;            // K/V copies evict-first in L2 (-1: the library's default)
  int swap = -1;                   // the swapped tile (-1: the library's default)
  int interleave = -1;             // small kernel's interleaved chunks (-1: the default)
  int hw_cvt = -1;                 // fp8: the hardware e4m3 conversion (-1: the default)
  int q_f16 = -1;                  // fp8, bf16 queries: Q in f16, K by the hardware conversion
  int small_chunks = 0;            // the small kernel with this many chunks for every batch
  int min_tiles = -1;              // small kernel: chunks unused below this many tiles a warp
  int d64_max_mb = -1;             // small kernel at d64: K/V MiB bound (0: none; -1: default)
  int min_chunks = 0;              // small kernel: fewest chunks a unit (0: the default)
  int one_wave = -1;               // small kernel: one CTA a unit in one wave (-1: default)
  int lean_issue = -1;             // aligned caches: issue_tile_lean (-1: the default)
  int tma = -1;                    // the TMA copy issue where eligible (-1: the default)
  int tma_prefetch = -1;           // ... asking L2 for each next tile (-1: the default)
  int cta_sweep = -1;              // split kernel, fp8 d64: the CTA page sweep (-1: default)
  int stream_waves = 0;            // stream mode's waves of ranges (0: the default)
  int dynamic_split = -1;          // stream mode's dynamic split (-1: the default)
  int merge_pdl = -1;              // stream mode: the merge kernel launched by PDL (-1: default)
};
inline const Variant kVariants[] = {
    {.name = "s2", .heads = 8, .stages = 2},
    {.name = "h4", .heads = 4, .stages = 0},
    {.name = "h4 s2", .heads = 4, .stages = 2},
    {.name = "h2 s2", .heads = 2, .stages = 2},
    {.name = "nosmall", .heads = 8, .stages = 0, .small = 0},
    {.name = "small w4 s2", .heads = 8, .stages = 2, .small_warps = 4},
    {.name = "evict-first", .heads = 8, .stages = 0, .evict_first = 1},
    {.name = "evict-normal nosmall", .heads = 8, .stages = 0, .small = 0, .evict_first = 0},
    {.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1},
    {.name = "swap h4 s2", .heads = 4, .stages = 2, .swap = 1},
    {.name = "noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0},
    {.name = "small interleaved", .heads = 8, .stages = 0, .interleave = 1},
    {.name = "small interleaved w4 s2", .heads = 8, .stages = 2, .small_warps = 4, .interleave = 1},
    {.name = "fp8 integer cvt", .heads = 8, .stages = 0, .hw_cvt = 0},
    {.name = "fp8 integer cvt swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .hw_cvt = 0},
    {.name = "fp8 integer cvt noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0, .hw_cvt = 0},
    {.name = "fp8 q bf16", .heads = 8, .stages = 0, .q_f16 = 0},
    {.name = "fp8 q bf16 swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .q_f16 = 0},
    {.name = "fp8 q bf16 noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0, .q_f16 = 0},
    {.name = "small c1", .heads = 8, .stages = 0, .small_chunks = 1},
    {.name = "small c2 w4 s2", .heads = 8, .stages = 2, .small_warps = 4, .small_chunks = 2},
    {.name = "small min tiles 0", .heads = 8, .stages = 0, .min_tiles = 0},
    {.name = "small min tiles 4 w4", .heads = 8, .stages = 0, .small_warps = 4, .min_tiles = 4},
    {.name = "small d64 bound 1 MiB", .heads = 8, .stages = 0, .d64_max_mb = 1},
    {.name = "small min chunks 1", .heads = 8, .stages = 0, .min_chunks = 1},
    {.name = "small one wave", .heads = 8, .stages = 0, .one_wave = 1},
    // (cta_sweep 0: at fp8 d64 the CTA page sweep, on by default, would take these launches.)
    {.name = "copy issue", .heads = 8, .stages = 0, .lean_issue = 0, .tma = 0, .cta_sweep = 0},
    {.name = "copy issue swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
     .lean_issue = 0, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue", .heads = 8, .stages = 0, .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
     .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "lean issue noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
     .lean_issue = 1, .tma = 0, .cta_sweep = 0},
    {.name = "tma", .heads = 8, .stages = 0, .tma = 1},
    {.name = "tma swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .tma = 1},
    {.name = "tma prefetch", .heads = 8, .stages = 0, .tma = 1, .tma_prefetch = 1},
    // 3 stages everywhere (fp8 defaults to 6 and 8; the "s2" row keeps 16-bit d64 at 2 stages).
    {.name = "s3", .heads = 8, .stages = 3},
    // The merge kernel by a plain launch (decode_merge_pdl 0): it starts after the split kernel
    // and derives the pieces' slots from the lengths then, not while the split kernel runs.
    {.name = "merge plain launch nosmall", .heads = 8, .stages = 0, .small = 0, .merge_pdl = 0},
    // The split kernel's CTA page sweep (fp8 caches at head_dim 64), on both tiles.
    {.name = "cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1},
    {.name = "cta sweep noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
     .cta_sweep = 1},
};

// Sets a variant for the scope, restores the previous tuning after.
class UseVariant {
 public:
  explicit UseVariant(const Variant& v);
  ~UseVariant() { cuda::cuda_tuning() = saved_; }

 private:
  cuda::CudaTuning saved_;
};

// The 16-bit sweep (quick_cases in quick mode, else 16 cases) and the fp8 one (2, else 8) under
// each of `forms`.
template <size_t N>
void sweep_each(const Variant (&forms)[N], int quick_cases) {
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    sweep(test::quick_mode() ? quick_cases : 16);
    sweep(test::quick_mode() ? 2 : 8, /*fp8=*/true);
  }
}

}  // namespace kvattn::test::decode_gpu
