// decode_attention's extended kernels on the GPU (part of kernels_decode_gpu_test; see
// decode_gpu_test.cpp): window, softcap, ALiBi and cache_leftpad in random sweeps, under every
// variant, at the tile edges and over a 32k context, with bad ids in the pages never read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/kernels/device_faults.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

// ---- issue 18: window, softcap, ALiBi (the extended kernels) ----

// The TMA copy issue (decode_tma.cuh) with the small kernel on and off: the edge tests of the
// extended kernels run them beside kVariants[0] and [4] (its first tile before a window's or
// pad's first key, its last tile past the length, over pages whose ids before them are bad).
const Variant kTmaSmallOn = {.name = "tma", .heads = 8, .stages = 0, .tma = 1};
const Variant kTmaSmallOff = {.name = "tma nosmall", .heads = 8, .stages = 0, .small = 0,
                              .tma = 1};

// A random case of the extended kernels: window kind x causal x GQA 1-8 (3 and 6 included) x
// pages 1/16/256 x q_len 1 and > 1 x plan (whole, stream, small, forced splits), with softcap
// and ALiBi ([H] or [B, H]) on some cases; c picks dtype, page size, group and q_len in turn.
DecodeCase feature_case(int c, std::mt19937_64& rng, bool fp8) {
  const bool quick = test::quick_mode();
  DecodeCase dc;
  dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
  dc.d = (c / 2) % 2 ? 128 : 64;
  // 256 (the swapped tile); 80 and 96 (padded 128 tiles; fp8 caches too since session 32).
  if ((c / 2) % 3 == 2) dc.d = std::vector<int64_t>{256, 80, 96}[(c / 6) % 3];
  dc.bs = std::vector<int64_t>{1, 16, 256}[(c / 4) % 3];
  dc.group = std::vector<int64_t>{1, 2, 3, 4, 6, 8}[(c / 12) % 6];
  dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3});
  const int64_t B = pick(rng, std::vector<int64_t>{1, 3, 17});
  dc.lens = random_lens(rng, B, quick ? 300 : 1300, true);
  if (c % 3 != 0) dc.q_len = pick(rng, std::vector<int64_t>{2, 3, 5});
  dc.causal = uniform_int(rng, 0, 3) != 0;
  // Windows at and around the 16-key tile edges, shorter and longer than the sequences.
  dc.window_left = pick(rng, std::vector<int64_t>{-1, 0, 1, 15, 16, 17, 31, 100, 255, 1000,
                                                  uniform_int(rng, 0, 1500)});
  if (!dc.causal) dc.window_right = pick(rng, std::vector<int64_t>{-1, -1, 0, 1, 2, 40});
  if (uniform_int(rng, 0, 2) == 0) dc.softcap = pick(rng, std::vector<float>{1.0f, 5.0f, 30.0f});
  dc.alibi = static_cast<int>(uniform_int(rng, 0, 2));
  if (dc.window_left < 0 && dc.window_right < 0 && dc.softcap == 0 && dc.alibi == 0) {
    dc.window_left = 7;  // every case runs the extended kernels
  }
  dc.plan_mode = c % 5;
  dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 2, 3, 7}));
  dc.aligned_cache = c % 7 != 6;
  dc.q_pad = pick(rng, std::vector<int64_t>{0, 0, 8});
  dc.with_lse = uniform_int(rng, 0, 1) == 1;
  dc.q_range = pick(rng, std::vector<float>{1.0f, 4.0f, 8.0f});  // large scores to cap
  dc.scale = uniform_int(rng, 0, 3) == 0 ? 1.0f : 0.0f;
  dc.fp8 = fp8;
  dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
  if (uniform_int(rng, 0, 2) == 0) {  // cache_leftpad on a third, pages before it poisoned
    for (int64_t len : dc.lens) {
      dc.leftpad.push_back(std::clamp<int64_t>(
          pick(rng, std::vector<int64_t>{0, 1, 15, 16, 17, len - 1, len, uniform_int(rng, 0, len)}),
          0, len));
    }
    dc.poison_pad = true;
  }
  return dc;
}

void feature_sweep(int cases, bool fp8) {
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DecodeCase dc = feature_case(c, rng, fp8);
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

TEST(DecodeGpuFeatures, RandomSweep) { feature_sweep(test::quick_mode() ? 24 : 144, false); }

TEST(DecodeGpuFeatures, Fp8CacheRandomSweep) { feature_sweep(test::quick_mode() ? 12 : 72, true); }

// The same on the swapped fp8 tile's extended form (window, softcap, ALiBi, leftpad through
// DecodeMods::apply_swap): decode_swap 1, small mode off.
TEST(DecodeGpuFeatures, Fp8CacheRandomSweepSwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  feature_sweep(test::quick_mode() ? 12 : 72, true);
}

// The stream kernel and the small kernel's variants compute the same.
TEST(DecodeGpuFeatures, Variants) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    feature_sweep(test::quick_mode() ? 3 : 12, false);
    feature_sweep(test::quick_mode() ? 2 : 6, true);
  }
}

// Windows at the tile edges (0, 1, 15, 16, 17, 31, 32, 33, 1000) over lengths at the tile
// edges, q_len 1 and 4, causal or not, GQA 3 and 8, every plan; softcap and ALiBi alone.
TEST(DecodeGpuFeatures, WindowTileEdges) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  for (int64_t left : {0, 1, 15, 16, 17, 31, 32, 33, 1000}) {
    for (int64_t q_len : {1, 4}) {
      DecodeCase dc;
      dc.window_left = left;
      dc.q_len = q_len;
      dc.causal = (left + q_len) % 3 != 0;
      dc.group = left % 2 ? 3 : 8;
      dc.hkv = 2;
      dc.bs = std::vector<int64_t>{1, 16, 256}[c % 3];
      dc.lens = {1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 200};
      dc.plan_mode = c % 5;
      dc.forced_splits = 3;
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
      ++c;
    }
  }
  for (int alibi : {1, 2}) {
    DecodeCase dc;
    dc.alibi = alibi;
    dc.q_len = 3;
    dc.lens = {1, 100, 1000};
    SCOPED_TRACE(test::case_note(c++, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
  for (float cap : {0.5f, 50.0f}) {
    DecodeCase dc;
    dc.softcap = cap;
    dc.scale = 1.0f;
    dc.q_range = 8.0f;
    dc.lens = {1, 100, 1000};
    SCOPED_TRACE(test::case_note(c++, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

// A 4096-key window over a 32k context (3000 / 1000 in quick mode), pages 16 and 256, GQA 4
// and 8, q_len 1 and 2, small and stream kernels, with softcap and ALiBi on some.
TEST(DecodeGpuFeatures, LongWindow32k) {
  const bool quick = test::quick_mode();
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  for (const int small : {1, 0}) {
    Variant v = kVariants[0];
    v.stages = 0;
    v.small = small;
    UseVariant use(v);
    for (int64_t bs : {16, 256}) {
      DecodeCase dc;
      dc.lens = {quick ? 3000 : 32768};
      if (c % 2) dc.lens.push_back(quick ? 2000 : 20000);
      dc.window_left = quick ? 999 : 4095;
      dc.bs = bs;
      dc.group = c % 2 ? 8 : 4;
      dc.q_len = c % 2 ? 2 : 1;
      dc.softcap = c == 2 ? 30.0f : 0.0f;
      dc.alibi = c == 3 ? 2 : 0;
      dc.poison_left = dc.window_left;
      SCOPED_TRACE(test::case_note(c, seed, std::string(small ? "small " : "stream ") + dc.describe()));
      check(dc, run_case(dc, rng));
      ++c;
    }
  }
}

// The pages entirely before a window are never read: bad ids there raise no fault and change
// nothing (the references read the good table), in every kernel and plan, by copy and by TMA,
// pages 1/16/256, q_len 1 and 3; without the window the same table is read and reported.
TEST(DecodeGpuFeatures, WindowSkipsBlocksBeforeIt) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  // small on / off, by copy and by TMA
  for (const Variant& v : {kVariants[0], kVariants[4], kTmaSmallOn, kTmaSmallOff}) {
    UseVariant use(v);
    for (int64_t bs : {1, 16, 256}) {
      for (int64_t q_len : {1, 3}) {
        DecodeCase dc;
        dc.bs = bs;
        dc.q_len = q_len;
        dc.lens = {600, 1000, 97, 0, 700};
        dc.window_left = bs == 256 ? 40 : 100;
        dc.poison_left = dc.window_left;
        dc.group = 6;
        dc.hkv = 1;
        dc.softcap = 20.0f;
        dc.plan_mode = c % 5;
        dc.forced_splits = 7;
        SCOPED_TRACE(test::case_note(c, seed, std::string(v.name) + " " + dc.describe()));
        check(dc, run_case(dc, rng));
        DecodeCase control = dc;  // no window: the bad ids are read and reported
        control.window_left = -1;
        control.softcap = 0.0f;
        const Outcome r = run_case(control, rng);
        EXPECT_EQ(r.faults & kFaultBlockOutOfRange, static_cast<uint32_t>(kFaultBlockOutOfRange))
            << "control without the window: faults " << r.faults;
        ++c;
      }
    }
  }
}

// A window wider than every context runs the extended kernels with nothing cut.
TEST(DecodeGpuFeatures, WindowWiderThanTheContext) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  DecodeCase dc;
  dc.lens = {5, 300, 1200};
  dc.q_len = 2;
  dc.window_left = 1 << 20;
  SCOPED_TRACE(test::case_note(0, seed, dc.describe()));
  check(dc, run_case(dc, rng));
}

// cache_leftpad at the tile edges (pads 0, 1, 15, 16, 17, len - 1, len over lengths at the
// edges), alone and with a window, q_len 1 and 3, GQA 3 and 8, head_dim 64/128/256/96, every
// plan, both kernels, both copy issues; the pages before each pad hold bad ids on the GPU
// (never read: no fault).
// Last, a pad past its sequence's length: clamped to the length (no key) and reported.
TEST(DecodeGpuFeatures, LeftpadTileEdges) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  int c = 0;
  // small on / off, by copy and by TMA
  for (const Variant& v : {kVariants[0], kVariants[4], kTmaSmallOn, kTmaSmallOff}) {
    UseVariant use(v);
    for (int64_t q_len : {1, 3}) {
      for (int64_t left : {-1, 20}) {
        DecodeCase dc;
        dc.q_len = q_len;
        dc.window_left = left;
        dc.group = c % 2 ? 3 : 8;
        dc.hkv = 2;
        dc.d = std::vector<int64_t>{128, 64, 256, 96}[c % 4];
        dc.bs = std::vector<int64_t>{1, 16, 256}[c % 3];
        dc.lens = {1, 15, 16, 17, 31, 32, 33, 64, 65, 200, 1000, 1000, 1000, 1000, 0};
        dc.leftpad = {0, 15, 1, 16, 17, 16, 32, 63, 64, 199, 0, 1, 500, 1000, 0};
        dc.poison_pad = true;
        dc.plan_mode = c % 5;
        dc.forced_splits = 3;
        dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
        SCOPED_TRACE(test::case_note(c, seed, std::string(v.name) + " " + dc.describe()));
        check(dc, run_case(dc, rng));
        ++c;
      }
    }
  }
  DecodeCase dc;
  dc.lens = {300, 40, 1000};
  dc.leftpad = {10, 40, 0};  // the GPU sees 47 for sequence 1
  dc.bad_pad = 1;
  dc.q_len = 2;
  SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
  check(dc, run_case(dc, rng));
}

}  // namespace
}  // namespace kvattn
