// prefill_attention's window, softcap and ALiBi on the GPU (issue 18; part of
// kernels_prefill_gpu_test; see prefill_gpu_test.cpp): random sweeps over head_dim
// 64/80/96/128/256, windows at the tile edges, both kernels of a feature call at their tile
// edges and over 4k rows, softcap and ALiBi alone and together, a window over a 32k context.
#include <gtest/gtest.h>

#include <algorithm>
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
using test::pick;
using test::uniform_int;

TEST(PrefillGpuFeatures, RandomSweep) {
  const bool quick = test::quick_mode();
  const int per_combo = quick ? 1 : 2;
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : kFeatureHeadDims) {
      for (bool causal : {true, false}) {
        for (bool paged : {false, true}) {
          for (int i = 0; i < per_combo; ++i, ++index) {
            if (!test::case_selected(index)) continue;
            const uint64_t seed = test::case_seed();
            std::mt19937_64 rng(seed);
            PrefillCase c = random_case(rng, dt, d, causal, paged, quick);
            add_random_features(rng, c);
            SCOPED_TRACE(test::case_note(index, seed, c.describe()));
            run_case(c, rng, std::string("prefill features ") + (paged ? "paged " : "packed ") +
                                 std::string(dtype_name(dt)));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Windows around the tile sizes of the extended kernels (64 or 128 query rows, 32 or 64 keys)
// over lengths at the tile edges, packed and paged with pages 1/16/256, each head_dim, causal
// or not, GQA 1..8; every third case with softcap and ALiBi too.
TEST(PrefillGpuFeatures, WindowTileEdges) {
  const std::vector<int64_t> lengths = {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 300};
  const std::vector<int64_t> windows = {0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000};
  const std::vector<int64_t> pages = {1, 16, 256};
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : kFeatureHeadDims) {
    for (bool causal : {true, false}) {
      for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
        for (int rep = 0; rep < (quick ? 1 : 2); ++rep, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.dt = index % 2 == 0 ? DType::kBF16 : DType::kF16;
          c.d = d;
          c.causal = causal;
          c.paged = layout > 0;
          c.bs = pages[static_cast<size_t>(index) % pages.size()];
          c.group = 1 + index % 8;
          c.hkv = 1 + index % 2;
          c.lq = lengths;
          c.lk = lengths;
          if (layout == 2) {
            for (int64_t& lk : c.lk) lk += pick(rng, std::vector<int64_t>{1, 32, 64, 129, 300});
          }
          c.window_left = pick(rng, windows);
          if (!causal) c.window_right = pick(rng, std::vector<int64_t>{-1, 0, 1, 32, 65});
          if (index % 3 == 0) {
            c.softcap = 30.0f;
            c.alibi = 1 + index % 2;
          }
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, "prefill features tile edges");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// ---- both kernels of a feature call: the Hopper kernel (kMods) and the sm_80 ext kernel ----

// Sets CudaTuning::prefill_sm90 for the scope (1: the Hopper kernel wherever
// prefill_sm90_eligible, 0: the sm_80 kernels everywhere), restoring the tuning after.
class UsePrefillPath {
 public:
  explicit UsePrefillPath(bool sm90) { cuda::cuda_tuning().prefill_sm90 = sm90 ? 1 : 0; }

 private:
  TuningRestore restore_;  // constructed (saving the switches) before the body sets one
};

// The features at the Hopper kernel's tile edges (128 or 192 query rows, 64 per consumer
// warpgroup; 128 keys, 80 at head_dim 256), once on each kernel (sm90: the Hopper kernel's
// kMods form on an H100/H200, the ext kernel elsewhere; sm80: the ext kernel), against the
// float64 reference: lengths 1, 63, 64, 65, 79, 80, 81, 127, 128, 129 in one batch with Lk = Lq, a prefix,
// or fewer keys (rows that see nothing); packed and pages 16 and 256; windows smaller and
// larger than a key tile, both sides when not causal; GQA 1..8; head_dim 64, 128 and 256;
// bf16 and fp16. Features by index: window; window + softcap (scale 1 every other time, so the
// cap bites); ALiBi [H] alone; window + softcap + ALiBi [B,H]; none (the plain kernels, head_dim
// 256 included).
TEST(PrefillGpuFeatures, BothPathsTileEdges) {
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 79, 80, 81, 127, 128, 129};
  const std::vector<int64_t> windows = {0,   1,   15,  63,  64,  65,  79,  80, 81,
                                        127, 128, 129, 191, 192, 193, 300, 5000};
  const bool quick = test::quick_mode();
  int index = 0;
  for (bool sm90 : {true, false}) {
    const UsePrefillPath path(sm90);
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        // packed, page 16, page 256, page 16 + prefix, packed + prefix, page 256 + fewer keys
        for (int layout = 0; layout < 6; ++layout, ++index) {
          if (quick && layout != 1 && layout != 4 && layout != 5) continue;
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.f64_reference = true;
          c.dt = index % 2 == 0 ? DType::kBF16 : DType::kF16;
          c.d = d;
          c.causal = causal;
          c.paged = layout == 1 || layout == 2 || layout == 3 || layout == 5;
          c.bs = layout == 2 || layout == 5 ? 256 : 16;
          c.group = 1 + index % 8;
          c.hkv = c.group > 4 ? 1 : 1 + (index / 8) % 2;
          c.lq = lengths;
          c.lk = lengths;
          if (layout == 3 || layout == 4) {
            for (int64_t& lk : c.lk) lk += pick(rng, std::vector<int64_t>{1, 63, 128, 129, 300});
          }
          if (layout == 5) {
            for (int64_t& lk : c.lk) lk = std::max<int64_t>(0, lk - pick(rng, std::vector<int64_t>{1, 64, 65}));
          }
          const int kind = index % 5;
          if (kind < 2 || kind == 3) {
            c.window_left = pick(rng, windows);
            if (!causal) c.window_right = pick(rng, std::vector<int64_t>{-1, 0, 1, 65, 129, 300});
          }
          if (kind == 1 || kind == 3) {
            c.softcap = kind == 1 ? 5.0f : 30.0f;
            if (kind == 1 && (index / 4) % 2 == 0) c.scale = 1.0f;
          }
          if (kind == 2) c.alibi = 1;
          if (kind == 3) c.alibi = 2;
          SCOPED_TRACE(test::case_note(index, seed, std::string(sm90 ? "sm90 " : "sm80 ") +
                                                        c.describe()));
          run_case(c, rng, std::string("prefill features both paths ") +
                               (sm90 ? "sm90" : "sm80"));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// 4097 query rows (one past a multiple of the 128 and 192-row tiles) over 4097 or 4097 + 300
// keys, causal, with windows of 100, 1000 and 4096 keys, softcap and ALiBi, packed and pages 16
// and 256, head_dim 64, 128 and 256, bf16 or fp16, on each kernel; float64 reference on 64-row
// windows. Quick mode: paged only.
TEST(PrefillGpuFeatures, BothPathsLong) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (bool sm90 : {true, false}) {
    const UsePrefillPath path(sm90);
    for (int layout = 0; layout < 3; ++layout) {  // packed, page 16, page 256
      for (int64_t d : {64, 128, 256}) {
        const int i = index++;
        if (quick && layout == 0) continue;
        if (!test::case_selected(i)) continue;
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        PrefillCase c;
        c.f64_reference = true;
        c.dt = i % 2 == 0 ? DType::kBF16 : DType::kF16;
        c.d = d;
        c.hkv = 1;
        c.group = 1 + i % 8;
        c.paged = layout > 0;
        c.bs = layout == 2 ? 256 : 16;
        c.lq = {4097, 129};
        c.lk = {4097 + (i % 4 < 2 ? 0 : 300), 129};
        const int mix = (i + i / 3) % 3;  // varies with head_dim and layout
        c.window_left = std::vector<int64_t>{100, 1000, 4096}[static_cast<size_t>(mix)];
        c.softcap = i % 2 == 0 ? 30.0f : 0.0f;
        c.alibi = mix == 1 ? 0 : 1 + i % 2;
        c.windows = 3;
        SCOPED_TRACE(test::case_note(i, seed, std::string(sm90 ? "sm90 " : "sm80 ") +
                                                  c.describe()));
        run_case(c, rng, std::string("prefill features both paths long ") +
                             (sm90 ? "sm90" : "sm80"));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Softcap and ALiBi alone and together, without a window, causal and not: both slope
// shapes, every head_dim, packed and paged, a batch of 3 and of 17.
TEST(PrefillGpuFeatures, SoftcapAndAlibi) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : kFeatureHeadDims) {
    for (int kind = 0; kind < 4; ++kind) {  // softcap, alibi [H], alibi [B,H], both
      if (quick && kind % 2 == 1) continue;
      if (!test::case_selected(index)) {
        ++index;
        continue;
      }
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      PrefillCase c = random_case(rng, kind % 2 == 0 ? DType::kBF16 : DType::kF16, d,
                                  /*causal=*/kind != 1, /*paged=*/kind >= 2, quick);
      c.softcap = kind == 0 || kind == 3 ? 10.0f : 0.0f;
      if (kind == 0) c.scale = 1.0f;  // raw scores in the tens: the cap matters
      c.alibi = kind == 0 ? 0 : (kind == 1 ? 1 : 2);
      if (kind == 3) c.alibi = 1 + static_cast<int>(index % 2);
      SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
      run_case(c, rng, "prefill softcap alibi");
      if (HasFatalFailure()) return;
    }
  }
}

// Issue 18's shape: a 4096-key window over a 32k causal prefill (paged, page 16, and a 4k
// prefix-hit chunk over 32k packed keys), head_dim 128 and 256, checked on 64-row windows.
// Quick mode: the packed head_dim 128 case only (a 4k chunk; the 32k-row ones are slow).
TEST(PrefillGpuFeatures, LongWindow32k) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : {128, 256}) {
    for (bool paged : {true, false}) {
      if (quick && (d != 128 || paged)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      PrefillCase c;
      c.dt = DType::kBF16;
      c.d = d;
      c.hkv = 1;
      c.group = 4;
      c.paged = paged;
      c.bs = 16;
      c.lq = {paged ? 32768 : 4096};
      c.lk = {32768};
      c.window_left = 4095;
      c.softcap = d == 256 ? 50.0f : 0.0f;
      c.windows = 3;
      SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
      run_case(c, rng, "prefill long window");
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kvattn
