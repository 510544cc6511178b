// Internal: the partial states of the pieces an item's keys were cut into (see
// attention_work_plan.h), saved by each piece and merged by the rows' maxima and sums.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_problem.h"

namespace kvattn::cpu::attn {

// A piece's partial state in its slot: acc [rows * d], then m [rows], then l [rows].
inline int64_t partial_floats(int64_t rows, int64_t d) { return rows * (d + 2); }

// Copies the online-softmax state of `rows` rows in sc into `slot`.
void save_partial(const Scratch& sc, int64_t rows, int64_t d, float* slot);

// Merges `parts` consecutive partial states (in key order) into sc: each row's maximum M over
// the parts, then sum and output weighted by exp(m_part - M). A row no part saw keeps -inf and
// 0 (zeros out).
void merge_partials(const float* first, int64_t parts, int64_t rows, int64_t d, Scratch& sc);

}  // namespace kvattn::cpu::attn
