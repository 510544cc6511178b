// Stream mode's ranges (decode_stream_ranges.h), static and dynamic split, on the CPU: every
// range holds a tile, the bounds cover the batch in order, of_tile inverts them, the static
// split is the equal cut the kernel always made, the dynamic split's static ranges hold ~3/4 of
// the tiles and its tiers shrink, and over random ragged batches the pieces the kernel writes
// (range r, sequence b at slot r + b; the meta's first slot and count) are exactly the ranges
// that meet each sequence, in distinct slots inside the workspace.
#include "kernels/cuda/decode/decode_stream_ranges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace {

using kvattn::cuda::kDynamicTiers;
using kvattn::cuda::StreamRanges;

int64_t size_of(const StreamRanges& s, int r) { return s.bound(r + 1) - s.bound(r); }

// The invariants of any cut; `exhaustive` checks of_tile on every tile, else on a sample.
void check_cut(const StreamRanges& s, bool exhaustive, std::mt19937_64& rng) {
  ASSERT_GE(s.nstatic, 1);
  EXPECT_EQ(s.bound(0), 0);
  EXPECT_EQ(s.bound(s.count()), s.total);
  if (s.total == 0) return;
  for (int r = 0; r < s.count(); ++r) {
    ASSERT_GE(size_of(s, r), 1) << "range " << r << " of " << s.count() << ", total " << s.total;
  }
  auto check_tile = [&](int g) {
    const int r = s.of_tile(g);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, s.count());
    ASSERT_LE(s.bound(r), g) << "tile " << g;
    ASSERT_LT(g, s.bound(r + 1)) << "tile " << g;
  };
  if (exhaustive) {
    for (int g = 0; g < s.total; ++g) check_tile(g);
  } else {
    std::uniform_int_distribution<int> tile(0, s.total - 1);
    for (int i = 0; i < 2000; ++i) check_tile(tile(rng));
    for (int r = 0; r < s.count(); ++r) {  // both ends of every range
      check_tile(s.bound(r));
      check_tile(s.bound(r + 1) - 1);
    }
  }
}

TEST(DecodeStreamRanges, StaticSplitIsTheEqualCut) {
  std::mt19937_64 rng(1);
  for (int total = 0; total <= 300; ++total) {
    for (int parts : {1, 2, 7, 132, 264}) {
      const StreamRanges s = StreamRanges::make(total, parts, 1 << 20, false);
      EXPECT_EQ(s.ndyn, 0);
      EXPECT_EQ(s.nstatic, std::max(1, std::min(parts, total)));
      for (int r = 0; r <= s.count(); ++r) {
        ASSERT_EQ(s.bound(r), static_cast<int>(int64_t{r} * total / s.nstatic));
      }
      check_cut(s, true, rng);
    }
  }
}

TEST(DecodeStreamRanges, DynamicSplitOnlyWhereEveryRangeGetsATileAndTheWorkspaceHoldsThem) {
  const int parts = 132, ranges = (1 + kDynamicTiers) * parts;
  EXPECT_EQ(StreamRanges::make(ranges - 1, parts, 1 << 20, true).ndyn, 0);
  EXPECT_EQ(StreamRanges::make(ranges, parts, 1 << 20, true).ndyn, kDynamicTiers * parts);
  EXPECT_EQ(StreamRanges::make(1 << 20, parts, ranges - 1, true).ndyn, 0);
  EXPECT_EQ(StreamRanges::make(1 << 20, parts, ranges, true).ndyn, kDynamicTiers * parts);
  // A workspace of fewer ranges than CTAs: fewer static ranges, no dynamic ones.
  const StreamRanges capped = StreamRanges::make(1 << 20, parts, 50, true);
  EXPECT_EQ(capped.nstatic, 50);
  EXPECT_EQ(capped.ndyn, 0);
}

TEST(DecodeStreamRanges, DynamicSplitCoversTheBatchInShrinkingTiers) {
  std::mt19937_64 rng(2);
  for (int parts : {1, 3, 132, 264, 528}) {
    const int ranges = (1 + kDynamicTiers) * parts;
    for (int total : {ranges, ranges + 1, ranges + 7, 2 * ranges - 1, 16384, 1 << 20,
                      (1 << 30) + 12345}) {
      SCOPED_TRACE(::testing::Message() << parts << " parts, " << total << " tiles");
      const StreamRanges s = StreamRanges::make(total, parts, 1 << 30, true);
      ASSERT_EQ(s.ndyn, kDynamicTiers * parts);
      check_cut(s, total <= 100000, rng);
      // The static ranges hold ~3/4 of the tiles (one tile a range, then 24/32 of the rest).
      const double spare = static_cast<double>(total - ranges);
      EXPECT_NEAR(s.bound(parts), parts + spare * 0.75, 1.0);
      // Every tier's ranges are no larger than the previous tier's (to the tile).
      int64_t prev_max = size_of(s, parts - 1);
      for (int tier = 0; tier < kDynamicTiers; ++tier) {
        int64_t tier_max = 0;
        for (int i = 0; i < parts; ++i) {
          tier_max = std::max(tier_max, size_of(s, parts + tier * parts + i));
        }
        EXPECT_LE(tier_max, prev_max + 1) << "tier " << tier;
        prev_max = tier_max;
      }
    }
  }
}

// The kernel's pieces over random ragged batches (empty sequences included): the meta of each
// sequence (first slot of_tile(first) + b, count of_tile(last) - of_tile(first) + 1) names
// exactly the ranges whose tiles meet it, and the slots r + b are distinct and inside a
// workspace of count() ranges.
TEST(DecodeStreamRanges, PiecesAndSlotsOverRaggedBatches) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const int B = std::uniform_int_distribution<int>(1, 300)(rng);
    const int max_tiles = std::uniform_int_distribution<int>(1, 400)(rng);
    std::vector<int> prefix(B + 1, 0);
    for (int b = 0; b < B; ++b) {
      const int t = rng() % 7 == 0 ? 0 : std::uniform_int_distribution<int>(1, max_tiles)(rng);
      prefix[b + 1] = prefix[b] + t;
    }
    const int total = prefix[B];
    const int parts = std::uniform_int_distribution<int>(1, 300)(rng);
    const bool dynamic = round % 2 == 0;
    const int part_cap = round % 5 == 0 ? std::max(1, parts / 2) : (1 + kDynamicTiers) * parts;
    const StreamRanges s = StreamRanges::make(total, parts, part_cap, dynamic);
    ASSERT_LE(s.count(), part_cap);
    std::set<int64_t> slots;
    for (int b = 0; b < B; ++b) {
      const int first = prefix[b], n = prefix[b + 1] - first;
      if (n == 0) continue;
      const int r0 = s.of_tile(first), r1 = s.of_tile(first + n - 1);
      ASSERT_LE(r0, r1);
      // (Ranges are ordered and contiguous: the neighbours of [r0, r1] settle the rest.)
      for (int r = std::max(0, r0 - 1); r <= std::min(s.count() - 1, r1 + 1); ++r) {
        const bool meets = s.bound(r) < first + n && first < s.bound(r + 1);
        ASSERT_EQ(meets, r0 <= r && r <= r1) << "sequence " << b << ", range " << r;
      }
      for (int r = r0; r <= r1; ++r) {
        const int64_t slot = int64_t{r} + b;
        ASSERT_TRUE(slots.insert(slot).second) << "slot " << slot << " twice";
        ASSERT_LT(slot, int64_t{part_cap} + B - 1);
      }
    }
  }
}

}  // namespace
