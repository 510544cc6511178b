// prefill_attention on the GPU at the edges (part of kernels_prefill_gpu_test; see
// prefill_gpu_test.cpp): hand-picked edge cases, the tile edges of the Hopper and sm_80
// kernels (head_dim 256 too), a 32k context and a batch of 256.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gpu_test_support.h"
#include "kernels/prefill_gpu_case.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

using namespace test::prefill_gpu;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

// Hand-picked edge cases: empty sequences, decode-like single queries, rows that see no key,
// no keys at all, page size 1 with a long prefix, every GQA group.
TEST(PrefillGpu, EdgeCases) {
  struct Spec {
    std::vector<int64_t> lq, lk;
    bool causal, paged;
    int64_t bs, group;
  };
  const std::vector<Spec> specs = {
      {{0, 54, 97}, {10, 54, 20}, true, false, 16, 4},    // Lq=0; Lk<Lq: rows see nothing
      {{0, 54, 97}, {10, 54, 20}, true, true, 1, 2},
      {{1, 1, 1}, {1, 1000, 97}, true, true, 16, 8},      // decode-like
      {{5, 3}, {0, 0}, false, false, 16, 1},              // no keys at all
      {{5, 3}, {0, 7}, true, true, 256, 4},
      {{97}, {1000}, true, true, 1, 8},                    // page 1, long prefix
      {{128, 129, 127}, {128, 129, 127}, true, false, 16, 2},  // tile edges
      {{48, 49, 47, 33}, {48, 49, 47, 31}, false, true, 48, 1},
  };
  int index = 0;
  for (const Spec& s : specs) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (int64_t d : {64, 128}) {
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        PrefillCase c;
        c.dt = dt;
        c.d = d;
        c.lq = s.lq;
        c.lk = s.lk;
        c.causal = s.causal;
        c.paged = s.paged;
        c.bs = s.bs;
        c.group = s.group;
        c.hkv = 2;
        SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
        run_case(c, rng, "prefill edge");
        if (HasFatalFailure()) return;
      }
    }
  }
}

// One tile-edge case: every length of `lengths` as a sequence (Lk = Lq, or with a prefix of
// one of `prefixes` keys when layout == 2), packed (layout 0) or paged on pages[index % size];
// GQA group and KV heads cycle with the case index.
PrefillCase tile_edge_case(std::mt19937_64& rng, DType dt, int64_t d, bool causal, int layout,
                           int index, const std::vector<int64_t>& lengths,
                           const std::vector<int64_t>& pages,
                           const std::vector<int64_t>& prefixes) {
  PrefillCase c;
  c.dt = dt;
  c.d = d;
  c.causal = causal;
  c.paged = layout > 0;
  c.bs = pages[static_cast<size_t>(index) % pages.size()];
  c.group = 1 + index % 8;
  c.hkv = 1 + index % 2;
  c.lq = lengths;
  c.lk = lengths;
  if (layout == 2) {
    for (int64_t& lk : c.lk) lk += pick(rng, prefixes);
  }
  return c;
}

// The tile edges of the Hopper kernel (128 query rows x 128 keys; 64 rows per consumer
// warpgroup) and of the sm_80 one: lengths 1, 63, 64, 65, 127, 128, 129 in one batch, with
// Lk = Lq and with a prefix; every page size class of the TMA path (whole pages per tile: 8,
// 16; whole tiles per page: 128, 256; neither, boxes of gcd(page, 128) keys: 48) and of the
// fallback (1); GQA groups 1..8; both head_dims and dtypes, causal and not. Then 4097 rows
// over a 4097 + 300 key prefix, checked on row windows.
TEST(PrefillGpu, TileEdges) {
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 127, 128, 129};
  const std::vector<int64_t> pages = {8, 16, 128, 256, 1, 48};
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const PrefillCase c = tile_edge_case(rng, dt, d, causal, layout, index, lengths, pages,
                                               {1, 64, 127, 129, 300});
          SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
          run_case(c, rng, "prefill tile edges");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  for (int64_t bs : {16, 256, 48}) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    PrefillCase c;
    c.dt = DType::kBF16;
    c.d = 128;
    c.hkv = 1;
    c.group = 3;
    c.paged = true;
    c.bs = bs;
    c.lq = {4097, 129};
    c.lk = {4097 + 300, 129};
    c.windows = 3;
    SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
    run_case(c, rng, "prefill tile edges long");
    if (HasFatalFailure()) return;
  }
}

// The same at head_dim 256, whose Hopper tile is 128 rows x 80 keys: lengths around both
// (79, 80, 81, 159, 160, 161 beside 1, 127, 128, 129), pages whose boxes are gcd(page, 80)
// keys (16, 256: 16; 80, 160: whole tiles; 24: 8; 48: 16) and the fallback (1, 12: gcd 4),
// GQA 1..8, both dtypes, causal and not, packed and paged, with and without a prefix.
TEST(PrefillGpu, TileEdgesHeadDim256) {
  const std::vector<int64_t> lengths = {1, 79, 80, 81, 127, 128, 129, 159, 160, 161};
  const std::vector<int64_t> pages = {16, 256, 80, 24, 48, 160, 1, 12};
  int index = 0;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      for (int layout = 0; layout < 3; ++layout) {  // packed, paged, paged with a prefix
        for (int rep = 0; rep < (layout == 0 ? 1 : 2); ++rep) {
          const uint64_t seed = test::case_seed();
          std::mt19937_64 rng(seed);
          const PrefillCase c = tile_edge_case(rng, dt, 256, causal, layout, index, lengths,
                                               pages, {1, 79, 80, 81, 300});
          SCOPED_TRACE(test::case_note(index++, seed, c.describe()));
          run_case(c, rng, "prefill tile edges d256");
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// A 32k-token causal prefill (paged, page 16) and a 4k-over-32k prefix hit (packed), checked
// on 64-row windows at the start, middle and end (every row must still be written).
TEST(PrefillGpu, LongContext32k) {
  if (test::quick_mode()) GTEST_SKIP() << "quick mode";
  for (bool paged : {true, false}) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    PrefillCase c;
    c.dt = DType::kBF16;
    c.d = 128;
    c.hkv = 1;
    c.group = 4;
    c.paged = paged;
    c.bs = 16;
    c.lq = {paged ? 32768 : 4096};
    c.lk = {32768};
    c.windows = 3;
    SCOPED_TRACE(test::case_note(0, seed, c.describe()));
    run_case(c, rng, "prefill long");
    if (HasFatalFailure()) return;
  }
}

TEST(PrefillGpu, Batch256) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  PrefillCase c;
  c.dt = DType::kBF16;
  c.d = 128;
  c.hkv = 2;
  c.group = 4;
  c.paged = true;
  c.bs = 16;
  const int64_t batch = test::quick_mode() ? 32 : 256;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t lq = uniform_int(rng, 0, 64);
    c.lq.push_back(lq);
    c.lk.push_back(lq + uniform_int(rng, 0, 96));
  }
  c.lq[0] = std::max<int64_t>(c.lq[0], 1);
  SCOPED_TRACE(test::case_note(0, seed, c.describe()));
  run_case(c, rng, "prefill batch256");
}

}  // namespace
}  // namespace kvattn
