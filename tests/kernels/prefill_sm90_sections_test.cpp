// The Hopper prefill's L2 sections (kernels/cuda/hopper/prefill_sm90_sections.h): the slot
// numbering covers every tile once whatever the section width and padding, heavy row blocks
// come first inside a section, and the section sizes keep a section's K/V within the budget.
// Plain C++: runs on the CPU in CI (the kernel itself is tested on the GPU by
// kernels_prefill_gpu_test, PrefillGpu.SmallL2Sections in prefill_gpu_schedule.cpp).
#include "kernels/cuda/hopper/prefill_sm90_sections.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <vector>

namespace kvattn::cuda::sm90 {
namespace {

TEST(PrefillSm90Sections, NumberingIsABijectionForEverySectionWidthAndPadding) {
  std::mt19937 rng(std::random_device{}());
  for (int c = 0; c < 400; ++c) {
    const int64_t pairs = std::uniform_int_distribution<int64_t>(1, 97)(rng);
    const int64_t m_blocks = std::uniform_int_distribution<int64_t>(1, 13)(rng);
    // Every width from 1 past `pairs` (one section) on some case; some random.
    const int64_t section = std::min(
        pairs, c < 100 ? c % (pairs + 2) + 1
                       : std::uniform_int_distribution<int64_t>(1, pairs + 5)(rng));
    const int64_t unit = c % 2 == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, 140)(rng);
    SCOPED_TRACE(testing::Message() << "pairs " << pairs << " m_blocks " << m_blocks
                                    << " section " << section << " unit " << unit);
    const int64_t slots = total_section_slots(pairs, m_blocks, section, unit);
    const int64_t per_section = section_slots(section, m_blocks, unit);
    ASSERT_EQ(per_section % unit, 0);
    ASSERT_GE(slots, pairs * m_blocks);
    std::vector<int> seen(static_cast<size_t>(pairs * m_blocks), 0);
    int64_t valid = 0;
    for (int64_t t = 0; t < slots; ++t) {
      const SectionTile st = section_tile(t, pairs, m_blocks, section, unit);
      if (!st.valid) continue;
      ++valid;
      ASSERT_GE(st.pair, 0);
      ASSERT_LT(st.pair, pairs);
      ASSERT_GE(st.z, 0);
      ASSERT_LT(st.z, m_blocks);
      // The tile's pair lies in its section (every section starts on a whole round), and
      // inside a section z never decreases.
      ASSERT_EQ(st.pair / section, t / per_section);
      const SectionTile prev = section_tile(t - 1, pairs, m_blocks, section, unit);
      if (t > 0 && prev.valid && (t - 1) / per_section == t / per_section) {
        ASSERT_GE(st.z, prev.z);
      }
      ++seen[static_cast<size_t>(st.pair * m_blocks + st.z)];
    }
    EXPECT_EQ(valid, pairs * m_blocks);
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "tile " << i;
    // Padding only at a section's end: fewer than `unit` slots a section.
    const int64_t sections = (pairs + section - 1) / section;
    EXPECT_LT(slots - pairs * m_blocks, sections * unit);
  }
}

// The consumers decode in 32-bit arithmetic where section_tile_fits says so: the same tile
// for every slot, on small schedules (every slot) and on large ones near the bound (sampled
// slots, the first and last included).
TEST(PrefillSm90Sections, NarrowArithmeticNamesTheSameTiles) {
  std::mt19937_64 rng(std::random_device{}());
  int large_cases = 0;
  for (int c = 0; c < 600; ++c) {
    const bool large = c % 2 == 1;
    const int64_t pairs = std::uniform_int_distribution<int64_t>(1, large ? 2'000'000 : 97)(rng);
    const int64_t max_m = large ? std::max<int64_t>(int64_t{INT32_MAX} / 2 / pairs - 200, 1) : 13;
    const int64_t m_blocks = std::uniform_int_distribution<int64_t>(1, max_m)(rng);
    const int64_t section = std::uniform_int_distribution<int64_t>(1, pairs)(rng);
    const int64_t unit = c % 3 == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, 132)(rng);
    const int64_t slots = total_section_slots(pairs, m_blocks, section, unit);
    if (!section_tile_fits(slots, unit)) continue;
    large_cases += large ? 1 : 0;
    SCOPED_TRACE(testing::Message() << "pairs " << pairs << " m_blocks " << m_blocks
                                    << " section " << section << " unit " << unit);
    auto check = [&](int64_t t) {
      const SectionTile wide = section_tile(t, pairs, m_blocks, section, unit);
      const SectionTile narrow = section_tile_as<int32_t>(
          static_cast<int32_t>(t), static_cast<int32_t>(pairs), static_cast<int32_t>(m_blocks),
          static_cast<int32_t>(section), static_cast<int32_t>(unit));
      ASSERT_EQ(narrow.valid, wide.valid) << "slot " << t;
      if (wide.valid) {
        ASSERT_EQ(narrow.pair, wide.pair) << "slot " << t;
        ASSERT_EQ(narrow.z, wide.z) << "slot " << t;
      }
    };
    if (!large) {
      for (int64_t t = 0; t < slots; ++t) check(t);
    } else {
      check(0);
      check(slots - 1);
      for (int i = 0; i < 200; ++i) check(std::uniform_int_distribution<int64_t>(0, slots - 1)(rng));
    }
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(large_cases, 100);  // most large schedules fit (so they were checked)
  // The bound itself: past it the narrow form is not used.
  EXPECT_TRUE(section_tile_fits(int64_t{INT32_MAX} / 2 - 132, 132));
  EXPECT_FALSE(section_tile_fits(int64_t{INT32_MAX} / 2, 132));
}

TEST(PrefillSm90Sections, OneSectionIsTheRowBlockMajorOrder) {
  // budget 0: the order before sections (pairs fastest, then row blocks), no padding.
  const int64_t pairs = prefill_l2_section(8, 32, 4, 128, 2048, 2, 0);
  EXPECT_EQ(pairs, 256);
  EXPECT_EQ(total_section_slots(256, 16, pairs, 1), 256 * 16);
  for (int64_t t = 0; t < 256 * 16; ++t) {
    const SectionTile st = section_tile(t, 256, 16, pairs, 1);
    EXPECT_TRUE(st.valid);
    EXPECT_EQ(st.pair, t % 256);
    EXPECT_EQ(st.z, t / 256);
  }
}

TEST(PrefillSm90Sections, SizesKeepTheBudgetInWholeGroupsOrSequences) {
  constexpr int64_t kMB = int64_t{1} << 20;
  // 8 x 2048, 32/8 heads, d128: 1 MB of K/V per KV head; 32 fit -> 4 sequences of 32 heads.
  EXPECT_EQ(prefill_l2_section(8, 32, 4, 128, 2048, 2, 32 * kMB), 128);
  // 1 x 16384, 32/8, d128: 8 MB per KV head -> 4 KV heads -> 16 query heads.
  EXPECT_EQ(prefill_l2_section(1, 32, 4, 128, 16384, 2, 32 * kMB), 16);
  // A KV head larger than the budget: still one whole group.
  EXPECT_EQ(prefill_l2_section(2, 9, 3, 64, 1 << 20, 2, 32 * kMB), 3);
  // Everything fits: one section.
  EXPECT_EQ(prefill_l2_section(4, 9, 3, 64, 4096, 2, 32 * kMB), 36);
  // Random: whole groups (or whole sequences), within the budget unless one group.
  std::mt19937 rng(std::random_device{}());
  for (int c = 0; c < 2000; ++c) {
    const int64_t kv_heads = std::uniform_int_distribution<int64_t>(1, 16)(rng);
    const int64_t group = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const int64_t heads = kv_heads * group;
    const int64_t seqs = std::uniform_int_distribution<int64_t>(1, 64)(rng);
    const int64_t len = std::uniform_int_distribution<int64_t>(1, 1 << 17)(rng);
    const int64_t d = int64_t{64} << std::uniform_int_distribution<int>(0, 2)(rng);
    const int64_t budget = std::uniform_int_distribution<int64_t>(1, 64)(rng) * kMB;
    const int64_t s = prefill_l2_section(seqs, heads, group, d, len, 2, budget);
    SCOPED_TRACE(testing::Message() << seqs << " x " << len << " " << heads << "/" << kv_heads
                                    << " d" << d << " budget " << budget << " -> " << s);
    ASSERT_GE(s, 1);
    ASSERT_LE(s, seqs * heads);
    if (s < seqs * heads) {
      ASSERT_TRUE(s % group == 0);
      if (s >= heads) ASSERT_EQ(s % heads, 0);
      if (s > group) ASSERT_LE(s / group * len * d * 4, budget);
    }
  }
}

// The dynamic schedule's launch rule (prefill_sm90_claims_tiles): never when switched off, with
// several producer warps, without a persistent grid, below the rounds asked, past the handover
// rings or on a batch whose row blocks are mostly empty; otherwise taken.
TEST(PrefillSm90Sections, ClaimedScheduleRule) {
  // 8 x 2048, 32 heads, 128-row blocks: 4096 tiles on 132 CTAs, every row block full.
  const int64_t tiles = 8 * 32 * 16;
  EXPECT_TRUE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, 132, 300, 1));
  EXPECT_TRUE(prefill_sm90_claims_tiles(2, 1, 8 * 2048, 8, 16, 128, tiles, 132, 300, 1));
  EXPECT_FALSE(prefill_sm90_claims_tiles(0, 1, 8 * 2048, 8, 16, 128, tiles, 132, 300, 1));
  EXPECT_FALSE(prefill_sm90_claims_tiles(1, 4, 8 * 2048, 8, 16, 128, tiles, 132, 300, 1));
  EXPECT_FALSE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, tiles, 300, 1));
  // The rings: 132 x (33 - 2) = 4092 < 4096 tiles.
  EXPECT_FALSE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, 132, 33, 1));
  EXPECT_TRUE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, 132, 34, 1));
  // One sequence of 2048 rows and seven of 100: 2748 of 16384 rows.
  EXPECT_FALSE(prefill_sm90_claims_tiles(1, 1, 2048 + 7 * 100, 8, 16, 128, tiles, 132, 300, 1));
  // Rounds: 4096 tiles are 31.03 rounds of 132 CTAs.
  EXPECT_TRUE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, 132, 300, 31));
  EXPECT_FALSE(prefill_sm90_claims_tiles(1, 1, 8 * 2048, 8, 16, 128, tiles, 132, 300, 32));
  // Half the rows: taken.
  EXPECT_TRUE(prefill_sm90_claims_tiles(1, 1, 8 * 1024, 8, 16, 128, tiles, 132, 300, 1));
}

// The guarantee the rule's ring bound gives for_each_claimed_tile (prefill_sm90_schedule.cuh):
// CTAs that stop claiming once one more tile could not fit their ring (max_tiles) still leave
// no slot unclaimed when num_tiles <= grid * (max_tiles - 1), whichever CTA frees up first
// and whichever slots have no rows. A host model of the loop: each step one random CTA takes
// its turn.
TEST(PrefillSm90Sections, ClaimedTilesAreEachTakenOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int c = 0; c < 300; ++c) {
    const int64_t grid = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    const uint32_t max_tiles = std::uniform_int_distribution<uint32_t>(3, 12)(rng);
    const int64_t num_tiles =
        std::uniform_int_distribution<int64_t>(grid + 1, grid * (max_tiles - 1))(rng);
    std::vector<bool> has_rows(static_cast<size_t>(num_tiles));
    for (auto&& r : has_rows) r = std::uniform_int_distribution<int>(0, 3)(rng) != 0;
    SCOPED_TRACE(testing::Message() << "grid " << grid << " max_tiles " << max_tiles
                                    << " num_tiles " << num_tiles);
    struct Cta {
      int64_t t;
      uint32_t taken = 0;
      bool done = false;
    };
    std::vector<Cta> ctas;
    for (int64_t i = 0; i < grid; ++i) ctas.push_back(Cta{i});
    uint32_t counter = 0;
    std::vector<int> seen(static_cast<size_t>(num_tiles), 0);
    int64_t running = grid;
    while (running > 0) {
      Cta& cta = ctas[std::uniform_int_distribution<size_t>(0, ctas.size() - 1)(rng)];
      if (cta.done) continue;
      if (cta.t >= num_tiles) {
        cta.done = true;
        --running;
        continue;
      }
      const bool claim = cta.taken + 1 < max_tiles;
      const uint32_t ticket = claim ? counter++ : 0;
      if (has_rows[static_cast<size_t>(cta.t)]) {
        ++seen[static_cast<size_t>(cta.t)];
        ++cta.taken;
        ASSERT_LE(cta.taken, max_tiles);
      } else {
        ++seen[static_cast<size_t>(cta.t)];  // taken; nothing to hand over
      }
      cta.t = claim ? grid + ticket : num_tiles;
    }
    for (int64_t t = 0; t < num_tiles; ++t) ASSERT_EQ(seen[static_cast<size_t>(t)], 1) << "slot " << t;
  }
}

}  // namespace
}  // namespace kvattn::cuda::sm90
