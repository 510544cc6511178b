// decode_attention on the GPU at the edges (part of kernels_decode_gpu_test; see
// decode_gpu_test.cpp): long contexts, large batches, two row tiles and all-empty batches on
// both tiles, and the TMA copy issue over whole-tile pages with lengths ending mid-tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/decode/decode_host.h"
#include "kernels/cuda/device_props.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

// Long contexts, a batch of 256, many query rows (GQA 8 x q_len 3: two row tiles), q_len
// longer than some sequences, and all-empty batches.
void shapes_at_the_edges() {
  const bool quick = test::quick_mode();
  std::vector<DecodeCase> list;
  DecodeCase base;
  {
    DecodeCase dc = base;  // one 32k sequence, page 16 and 256
    dc.lens = {quick ? 3000 : 32768};
    list.push_back(dc);
    dc.bs = 256;
    dc.dt = DType::kF16;
    list.push_back(dc);
    dc.plan_mode = 2;  // no split: one CTA per KV head streams all of it
    dc.forced_splits = 1;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // 256 sequences, some empty
    dc.group = 2;
    dc.hkv = 2;
    dc.lens.resize(quick ? 20 : 256);
    list.push_back(dc);
    dc.plan_mode = 1;
    dc.bs = 32;
    dc.d = 64;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // 24 rows per KV head
    dc.group = 8;
    dc.q_len = 3;
    dc.hkv = 1;
    dc.lens = {1, 2, 3, 700, 64};
    list.push_back(dc);
    dc.plan_mode = 2;
    dc.forced_splits = 3;
    dc.causal = false;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // lone and uniform sequences planned for their own length (the
    dc.group = 4;          // small kernel's guessed split is right), then for half of it
    dc.hkv = 8;
    dc.lens = {quick ? 2000 : 8192};
    dc.plan_mode = 3;
    list.push_back(dc);
    dc.bs = 256;
    dc.with_lse = true;
    list.push_back(dc);
    dc.lens = std::vector<int64_t>(4, quick ? 1500 : 8192);
    list.push_back(dc);
    dc.plan_mode = 4;
    list.push_back(dc);
    dc.lens = {quick ? 999 : 5000};
    dc.bs = 16;
    list.push_back(dc);
  }
  {
    DecodeCase dc = base;  // nothing to attend to at all
    dc.lens = {0, 0, 0};
    list.push_back(dc);
    dc.plan_mode = 2;
    dc.forced_splits = 4;
    list.push_back(dc);
  }
  for (size_t c = 0, n = list.size(); c < n; ++c) {  // each again over a float8_e4m3 cache
    DecodeCase dc = list[c];
    dc.fp8 = true;
    dc.fp8_scale = 0.05f;
    list.push_back(dc);
  }
  for (size_t c = 0; c < list.size(); ++c) {
    if (!test::case_selected(static_cast<int>(c))) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc = list[c];
    if (dc.lens.size() >= 20) dc.lens = random_lens(rng, static_cast<int64_t>(dc.lens.size()), 1000, true);
    SCOPED_TRACE(test::case_note(static_cast<int>(c), seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

TEST(DecodeGpu, ShapesAtTheEdges) { shapes_at_the_edges(); }

// The same edges with the swapped tile on and off (whichever the default is), small mode off so
// that the stream and whole-sequence kernels take every batch.
TEST(DecodeGpu, ShapesAtTheEdgesBothTiles) {
  for (const int swap : {0, 1}) {
    SCOPED_TRACE(swap ? "swapped tile" : "16-row tile");
    UseVariant use(Variant{.name = "", .heads = 8, .stages = 0, .small = 0, .swap = swap});
    shapes_at_the_edges();
  }
}

// The TMA copy issue (decode_tma.cuh) on the cases it takes: pages of whole 16-key tiles
// (16, 32, 48, 64, 256), head_dim 64, 128 and 256 over 16-bit caches and 128 over fp8 ones
// (every third case: the reference on the stored bytes), GQA groups 1-8 (3 and 6 included), q_len
// 1-5 (several row chunks), the small, 16-row and swapped kernels, lengths ending mid-tile
// over poisoned (NaN) page tails, against the float64 reference and the CPU backend; pages it
// does not take (1, 12) fall back to the cp.async forms. On an sm_90a device the eligible
// cases must have launched it.
TEST(DecodeGpu, TmaCopyIssue) {
  const bool quick = test::quick_mode();
  const Variant forms[] = {
      {.name = "tma", .heads = 8, .stages = 0, .tma = 1},
      {.name = "tma swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1, .tma = 1},
      {.name = "tma noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .tma = 1},
      {.name = "tma prefetch", .heads = 8, .stages = 0, .tma = 1, .tma_prefetch = 1}};
  const std::vector<int64_t> pages = {16, 32, 48, 64, 256, 16, 1, 12};
  const int64_t before = cuda::decode_host::tma_launches();
  int eligible = 0;
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 8 : 24); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      dc.d = c % 7 == 6 ? 256 : (c / 2) % 2 ? 128 : 64;
      dc.bs = pages[(c / 3) % pages.size()];
      dc.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 6, 8});
      dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3});
      const int64_t B = pick(rng, std::vector<int64_t>{1, 3, 17, 33});
      dc.lens = random_lens(rng, B, quick ? 300 : 1300, true);
      if (c % 3 == 1) {
        dc.q_len = pick(rng, std::vector<int64_t>{2, 3, 5});
        dc.causal = uniform_int(rng, 0, 5) != 0;
      }
      dc.plan_mode = c % 5;
      dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 2, 3, 7}));
      dc.aligned_cache = true;
      dc.with_lse = c % 2 == 0;
      dc.q_pad = pick(rng, std::vector<int64_t>{0, 8, 3});
      dc.fp8 = c % 3 == 2;
      if (dc.fp8) {
        dc.d = 128;
        dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
      }
      if (dc.bs % 16 == 0) ++eligible;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
  if (eligible > 0 && cuda::decode_host::tma_built() && cuda::compute_capability(0) == 90) {
    EXPECT_GT(cuda::decode_host::tma_launches(), before)
        << "no case took the TMA form on an sm_90a device; tensor maps refused "
        << cuda::decode_host::tma_refusals() << " times, last CUresult "
        << cuda::decode_host::last_tma_refusal();
  }
  if (cuda::decode_host::tma_refusals() > 0) {
    ADD_FAILURE() << "the driver refused the TMA form's tensor maps "
                  << cuda::decode_host::tma_refusals() << " times (last CUresult "
                  << cuda::decode_host::last_tma_refusal() << ") on cases meant for it";
  }
}

}  // namespace
}  // namespace kvattn
