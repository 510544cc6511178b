// The CPU attention backend's work plan (src/kernels/cpu/attention_work_plan.h), for random
// item lists and limits:
// - the pieces of every item cover its key range exactly once; a cut item's pieces start on
//   its key tiles, hold consecutive partial slots in key order, and are no shorter than
//   min_piece_keys but for the last; an uncut item is one piece that writes its output;
// - the partial states fit max_partial_floats, or nothing is cut;
// - pieces are ordered longest first.
// And the cases it exists for: one decoding sequence (3 KV heads, 8192 keys) is cut into
// pieces for any team; a large batch of short sequences is not cut at all.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/attention_work_plan.h"

namespace kvattn::cpu {
namespace {

void check_plan(const std::vector<KeySpan>& items, const std::vector<int64_t>& floats,
                const WorkPlanLimits& lim, const WorkPlan& plan) {
  const auto n = static_cast<int64_t>(items.size());
  std::vector<std::vector<WorkPiece>> by_item(n);
  for (const WorkPiece& p : plan.pieces) {
    RC_ASSERT(p.item >= 0 && p.item < n);
    by_item[p.item].push_back(p);
  }
  for (size_t k = 1; k < plan.pieces.size(); ++k) {
    RC_ASSERT(plan.pieces[k - 1].keys.size() >= plan.pieces[k].keys.size());
  }
  std::vector<int> slot_seen(plan.num_parts, 0);
  int64_t partial = 0;
  size_t cut_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto& ps = by_item[i];
    RC_ASSERT(!ps.empty());
    if (ps.size() == 1) {
      RC_ASSERT(ps[0].part == -1);
      RC_ASSERT(ps[0].keys.begin == items[i].begin);
      RC_ASSERT(ps[0].keys.end == items[i].end);
      continue;
    }
    // A cut item: listed in cut_items in item order, slots consecutive in key order.
    RC_ASSERT(cut_seen < plan.cut_items.size());
    const WorkPlan::CutItem& c = plan.cut_items[cut_seen++];
    RC_ASSERT(c.item == i);
    RC_ASSERT(c.parts == static_cast<int64_t>(ps.size()));
    std::sort(ps.begin(), ps.end(),
              [](const WorkPiece& a, const WorkPiece& b) { return a.keys.begin < b.keys.begin; });
    int64_t covered = items[i].begin;
    for (size_t k = 0; k < ps.size(); ++k) {
      RC_ASSERT(ps[k].part == c.first_part + static_cast<int64_t>(k));
      RC_ASSERT(ps[k].keys.begin == covered);  // contiguous, no overlap, no gap
      RC_ASSERT((ps[k].keys.begin - items[i].begin) % lim.key_tile == 0);
      RC_ASSERT(ps[k].keys.size() > 0);
      if (k + 1 < ps.size()) RC_ASSERT(ps[k].keys.size() >= lim.min_piece_keys);
      ++slot_seen[ps[k].part];
      covered = ps[k].keys.end;
    }
    RC_ASSERT(covered == items[i].end);
    partial += c.parts * floats[i];
  }
  RC_ASSERT(cut_seen == plan.cut_items.size());
  for (int s : slot_seen) RC_ASSERT(s == 1);
  RC_ASSERT(partial <= lim.max_partial_floats);
}

RC_GTEST_PROP(AttentionWorkPlan, PiecesCoverEveryItemOnceWithinTheBudget, ()) {
  const int n = *rc::gen::inRange(0, 200);
  std::vector<KeySpan> items(n);
  std::vector<int64_t> floats(n);
  for (int i = 0; i < n; ++i) {
    const int64_t begin = *rc::gen::inRange(0, 5000);
    const int64_t len = *rc::gen::weightedOneOf<int64_t>(
        {{3, rc::gen::inRange<int64_t>(0, 300)}, {2, rc::gen::inRange<int64_t>(0, 40000)},
         {1, rc::gen::just<int64_t>(0)}});
    items[i] = {begin, begin + len};
    floats[i] = *rc::gen::inRange<int64_t>(1, 300000);
  }
  WorkPlanLimits lim;
  lim.key_tile = *rc::gen::element<int64_t>(1, 16, 64);
  lim.target_pieces = *rc::gen::inRange<int64_t>(1, 200);
  lim.min_piece_keys = *rc::gen::inRange<int64_t>(1, 1000);
  lim.max_partial_floats = *rc::gen::inRange<int64_t>(0, int64_t{8} << 20);
  const WorkPlan plan = plan_work(items, floats, lim);
  RC_TAG(plan.cut_items.empty() ? "nothing cut" : "some items cut");
  check_plan(items, floats, lim, plan);
}

TEST(AttentionWorkPlan, OneDecodingSequenceIsCutAndABigBatchIsNot) {
  WorkPlanLimits lim;  // the backend's own limits (key tile 64)
  // SmolLM2's decode step at 8192 keys: 3 items (KV heads), 3 rows (the group) of 64 + 2.
  const std::vector<KeySpan> one(3, KeySpan{0, 8192});
  const WorkPlan a = plan_work(one, std::vector<int64_t>(3, 3 * 66), lim);
  ASSERT_EQ(a.cut_items.size(), 3u);
  for (const auto& c : a.cut_items) EXPECT_GE(c.parts, 16) << "item " << c.item;
  EXPECT_EQ(a.num_parts, static_cast<int64_t>(a.pieces.size()));
  // 256 sequences x 8 KV heads x 1024 keys: 2,048 items, none cut.
  const std::vector<KeySpan> many(2048, KeySpan{0, 1024});
  const WorkPlan b = plan_work(many, std::vector<int64_t>(2048, 2 * 130), lim);
  EXPECT_TRUE(b.cut_items.empty());
  EXPECT_EQ(b.pieces.size(), 2048u);
  EXPECT_EQ(b.num_parts, 0);
  // No items, and items without keys: nothing to cut.
  EXPECT_TRUE(plan_work({}, {}, lim).pieces.empty());
  const WorkPlan c = plan_work(std::vector<KeySpan>(5), std::vector<int64_t>(5, 10), lim);
  EXPECT_EQ(c.pieces.size(), 5u);
  EXPECT_TRUE(c.cut_items.empty());
}

}  // namespace
}  // namespace kvattn::cpu
