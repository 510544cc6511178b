// prefill_attention's Hopper schedule on the GPU under its cuda_tuning() forms (part of
// kernels_prefill_gpu_test; see prefill_gpu_test.cpp): small L2 sections, the consumers' tile
// decode narrow and wide, the tile handover of the plain and the window / softcap / ALiBi
// kernels, the dynamic tile schedule and paged producer warps.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
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

// The Hopper schedule's L2 sections (prefill_sm90_sections.h) cut small: a 1 MB budget gives
// most of these cases several sections, some ending mid-sequence or narrower than the rest
// (the order of the tiles changes, the results must not).
TEST(PrefillGpu, SmallL2Sections) {
  const TuningRestore restore;
  cuda::cuda_tuning().prefill_sm90_l2_mb = 1;
  const bool quick = test::quick_mode();
  int index = 0;
  for (int64_t d : {64, 128}) {
    for (bool causal : {true, false}) {
      for (bool paged : {false, true}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, paged, false);
          c.hkv = 2;
          c.group = pick(rng, std::vector<int64_t>{3, 4, 8});
          SCOPED_TRACE(test::case_note(index, seed, c.describe()));
          run_case(c, rng, "prefill small L2 sections");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The consumers' tile decode in both forms (KVATTN_PREFILL_SM90_NARROW_DECODE: 32-bit, the
// default, and 64-bit), on schedules of one and of several L2 sections (1 MB budget), every
// head_dim, causal or not, packed or paged: the producer keeps the 64-bit decode, so a tile
// named differently would hang or corrupt.
TEST(PrefillGpu, NarrowAndWideTileDecode) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  int index = 0;
  for (int l2_mb : {32, 1}) {
    cuda::cuda_tuning().prefill_sm90_l2_mb = l2_mb;
    cuda::cuda_tuning().prefill_sm90_narrow_decode = l2_mb == 32 ? 0 : 1;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, index % 2 == 1, quick);
          c.f64_reference = true;
          SCOPED_TRACE(test::case_note(
              index, seed,
              "l2 " + std::to_string(l2_mb) + " MB narrow " +
                  std::to_string(cuda::cuda_tuning().prefill_sm90_narrow_decode) + " " +
                  c.describe()));
          run_case(c, rng, "prefill narrow tile decode");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Random cases (head_dim 64, 128 and 256, causal or not, packed or paged, bf16 and fp16;
// float64 reference, random features where `features`) with the tuning field `mode` set to
// each of `modes` in turn.
void run_handover_modes(int cuda::CudaTuning::*mode, std::initializer_list<int> modes,
                        bool features, const std::string& label) {
  const bool quick = test::quick_mode();
  int index = 0;
  for (int m : modes) {
    cuda::cuda_tuning().*mode = m;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const DType dt = index % 3 == 2 ? DType::kF16 : DType::kBF16;
          PrefillCase c = random_case(rng, dt, d, causal, /*paged=*/index % 2 == 1, quick);
          if (features) add_random_features(rng, c);
          c.f64_reference = true;
          SCOPED_TRACE(test::case_note(index, seed,
                                       label + " " + std::to_string(m) + " " + c.describe()));
          run_case(c, rng, "prefill " + label);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The plain kernels with the tile handover (CudaTuning::prefill_sm90_handover) never, always
// and where key loops are short (the default). (Run under racecheck and memcheck: the handed
// tiles come by the async proxy into slots written once, prefill_sm90_tile_handover.cuh.)
TEST(PrefillGpu, TileHandoverOnAndOff) {
  const TuningRestore restore;
  run_handover_modes(&cuda::CudaTuning::prefill_sm90_handover, {0, 1, 2}, false,
                     "tile handover");
}

// The window / softcap / ALiBi kernels with the tile handover
// (CudaTuning::prefill_sm90_mods_handover; default 3, mode 2 at head_dim 128 only) always, where
// key loops are short, and by the default rule, on random features (run under racecheck and
// memcheck too).
TEST(PrefillGpuFeatures, TileHandover) {
  const TuningRestore restore;
  run_handover_modes(&cuda::CudaTuning::prefill_sm90_mods_handover, {1, 2, 3}, true,
                     "features tile handover");
}

// The dynamic tile schedule (CudaTuning::prefill_sm90_dynamic 1 and 2: the producer claims
// tiles from a counter, for_each_claimed_tile): batches of 8-32 heads over 4-12 sequences of
// nearly one length (most row blocks full), so that the tiles outnumber a persistent grid of
// 132 CTAs several times over; causal (64-row windows, every row written) and not (every
// row); packed and paged (pages of 128 and 256 keys take one producer warp and so the dynamic
// schedule; 16-key pages take four and stay static); head_dim 64, 128 and 256; random window /
// softcap / ALiBi on every other pair of cases. The cases run
// one after another on one stream, each claiming from the counter the one before reset.
TEST(PrefillGpu, DynamicTileSchedule) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  int index = 0;
  // Every launch of more tiles than the grid claims (the default asks for 8 rounds of it).
  cuda::cuda_tuning().prefill_sm90_dynamic_min_rounds = 1;
  for (int mode : {1, 2}) {
    cuda::cuda_tuning().prefill_sm90_dynamic = mode;
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c;
          c.dt = index % 3 == 2 ? DType::kF16 : DType::kBF16;
          c.d = d;
          c.causal = causal;
          c.paged = index % 2 == 1;
          c.bs = pick(rng, std::vector<int64_t>{128, 256, 16});
          c.hkv = pick(rng, std::vector<int64_t>{2, 4});
          c.group = pick(rng, std::vector<int64_t>{4, 3, 8});
          const int64_t batch = uniform_int(rng, 4, quick ? 6 : 12);
          const int64_t max_len = causal ? (quick ? 1100 : 2200) : 700;
          for (int64_t b = 0; b < batch; ++b) {
            const int64_t lq = uniform_int(rng, max_len * 3 / 4, max_len);
            c.lq.push_back(lq);
            c.lk.push_back(lq + pick(rng, std::vector<int64_t>{0, 0, uniform_int(rng, 1, 300)}));
          }
          if ((index / 2) % 2 == 1) add_random_features(rng, c);  // the kMods kernels
          if (causal) c.windows = 3;
          SCOPED_TRACE(test::case_note(index, seed,
                                       "dynamic " + std::to_string(mode) + " " + c.describe()));
          run_case(c, rng, "prefill dynamic schedule");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Paged K/V with 1, 2 and 3 producer warps (the default, 4, runs in every other paged test)
// issuing a tile's page pieces (KVATTN_PREFILL_SM90_PRODUCER_WARPS; head_dim 128 takes it, 64
// and 256 keep one warp): pages of 8, 16, 32, 48 and 64 keys (16, 8, 4, 8 and 2 pieces a
// tile), causal or not, with window / softcap / ALiBi on every other case; float64 reference.
TEST(PrefillGpu, PagedProducerWarps) {
  const TuningRestore restore;
  const bool quick = test::quick_mode();
  const std::vector<int64_t> pages = {8, 16, 32, 48, 64};
  int index = 0;
  for (int warps = 1; warps <= 3; ++warps) {
    cuda::cuda_tuning().prefill_sm90_producer_warps = warps;
    for (int64_t d : {128, 64, 256}) {
      for (bool causal : {true, false}) {
        for (int i = 0; i < (quick ? 1 : 2); ++i, ++index) {
          if (!test::case_selected(index)) continue;
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          PrefillCase c = random_case(rng, DType::kBF16, d, causal, /*paged=*/true, quick);
          c.f64_reference = true;
          c.bs = pages[static_cast<size_t>(index) % pages.size()];
          if (index % 2 == 1) {
            c.window_left = pick(rng, std::vector<int64_t>{15, 129, 1000});
            c.softcap = 30.0f;
            c.alibi = 1;
          }
          SCOPED_TRACE(test::case_note(index, seed, "producer warps " + std::to_string(warps) +
                                                        " " + c.describe()));
          run_case(c, rng, "prefill paged producer warps");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvattn
