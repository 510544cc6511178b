// Internal: how the CPU attention backend cuts its work items into pieces of their key range
// (flash-decoding on the CPU). A decode step of one sequence has one item per KV head, too
// few for a team of threads (SmolLM2's 3 KV heads on 2 threads split 2:1; on 16 cores 13
// idle); cutting each item's keys into pieces, attended independently and merged by their
// log-sum-exp, keeps every thread busy.
//
// The plan depends on the problem's shape only, never on the team size, so a result does
// not change with OMP_NUM_THREADS or the engine's per-step team: the same pieces are
// attended tile by tile exactly as an uncut item would be, and merged in a fixed order.
#pragma once

#include <cstdint>
#include <vector>

namespace kvattn::cpu {

struct KeySpan {
  int64_t begin = 0, end = 0;  // [begin, end); empty when begin >= end
  int64_t size() const { return end > begin ? end - begin : 0; }
};

struct WorkPiece {
  int64_t item = 0;  // index into the item list
  KeySpan keys;      // a tile-aligned part of the item's keys (the whole range when uncut)
  int64_t part = -1;  // slot of its partial state; -1: the item is uncut and writes its output
};

struct WorkPlanLimits {
  int64_t key_tile = 64;         // pieces start on the item's key tiles
  int64_t target_pieces = 64;    // the whole problem's keys over about this many pieces
  int64_t min_piece_keys = 256;  // never cut finer than this
  int64_t max_partial_floats = int64_t{4} << 20;  // bound on all pieces' partial state
};

struct WorkPlan {
  std::vector<WorkPiece> pieces;  // longest first (a dynamic schedule then ends balanced)
  // The items cut into several pieces, in item order: {item, its first partial slot, its
  // number of pieces}; the pieces of an item hold consecutive slots, in key order.
  struct CutItem {
    int64_t item, first_part, parts;
  };
  std::vector<CutItem> cut_items;
  int64_t num_parts = 0;
};

// Plans the pieces of items whose key ranges are `item_keys`; a partial state (one piece's
// unnormalised output rows, running maxima and sums) of item i takes partial_floats[i]
// floats. The piece length P is the larger of min_piece_keys and the total keys over
// target_pieces (rounded up to key_tile); when the partial states would exceed
// max_partial_floats, P doubles until they fit. An item of n >= 2P keys is cut into
// floor(n / P) parts of equal whole key tiles (each >= P keys but the last); shorter items
// stay whole.
WorkPlan plan_work(const std::vector<KeySpan>& item_keys,
                   const std::vector<int64_t>& partial_floats, const WorkPlanLimits& limits = {});

}  // namespace kvattn::cpu
