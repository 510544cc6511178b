// plan_work: see attention_work_plan.h.
#include "kernels/cpu/attention_work_plan.h"

#include <algorithm>

namespace kvattn::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How an item of `keys` is cut when pieces hold at least `piece` keys: into floor(keys /
// piece) parts of equal whole tiles (the last one shorter), so every part starts on one of
// the item's key tiles and every part but the last holds >= piece keys.
struct Cut {
  int64_t length, parts;
};
Cut cut(const KeySpan& keys, int64_t piece, int64_t tile) {
  const int64_t parts = keys.size() / piece;
  if (parts <= 1) return {keys.size(), 1};
  const int64_t length = ceil_div(ceil_div(keys.size(), tile), parts) * tile;
  return {length, ceil_div(keys.size(), length)};
}

}  // namespace

WorkPlan plan_work(const std::vector<KeySpan>& item_keys,
                   const std::vector<int64_t>& partial_floats, const WorkPlanLimits& limits) {
  const auto items = static_cast<int64_t>(item_keys.size());
  const int64_t tile = std::max<int64_t>(1, limits.key_tile);
  int64_t total = 0;
  for (const KeySpan& k : item_keys) total += k.size();

  int64_t piece = std::max(limits.min_piece_keys, ceil_div(total, limits.target_pieces));
  piece = std::max(tile, ceil_div(piece, tile) * tile);
  // Partial state of the cut items at a piece length; doubling the length at least halves
  // every cut item's parts, so the loop ends (at the latest when nothing is cut).
  const auto partial_state = [&](int64_t len) {
    int64_t floats = 0;
    for (int64_t i = 0; i < items; ++i) {
      const int64_t parts = cut(item_keys[i], len, tile).parts;
      if (parts > 1) floats += parts * partial_floats[i];
    }
    return floats;
  };
  while (partial_state(piece) > limits.max_partial_floats) piece *= 2;

  WorkPlan plan;
  for (int64_t i = 0; i < items; ++i) {
    const KeySpan keys = item_keys[i];
    const auto [length, parts] = cut(keys, piece, tile);
    if (parts == 1) {
      plan.pieces.push_back({i, keys, -1});
      continue;
    }
    plan.cut_items.push_back({i, plan.num_parts, parts});
    for (int64_t k = 0; k < parts; ++k) {
      const int64_t b = keys.begin + k * length;
      plan.pieces.push_back({i, {b, std::min(b + length, keys.end)}, plan.num_parts + k});
    }
    plan.num_parts += parts;
  }
  std::stable_sort(plan.pieces.begin(), plan.pieces.end(),
                   [](const WorkPiece& a, const WorkPiece& b) {
                     return a.keys.size() > b.keys.size();
                   });
  return plan;
}

}  // namespace kvattn::cpu
