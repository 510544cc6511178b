// L2 sections of the Hopper prefill's tile schedule (prefill_sm90_schedule.cuh): which
// (sequence, head) pair and row block a slot number names, and how many pairs a section holds.
// Plain C++ (host and device), so the CPU tests check the numbering without a GPU.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#if defined(__CUDACC__)
#define KVATTN_HD __host__ __device__
#else
#define KVATTN_HD
#endif

namespace kvattn::cuda::sm90 {

struct SectionTile {
  int64_t pair = 0;  // sequence * num_heads + head
  int64_t z = 0;     // row block, counted from the last (0 = the last row block)
  bool valid = false;  // false: a padding slot (no tile)
};

// A section's tile count, rounded up to a multiple of `unit` (the persistent grid's CTA count,
// else 1): with the static round-robin deal, a round of the grid then never holds the light
// end of one section beside the heavy start of the next, which left CTAs up to a whole heavy
// tile apart (session 13: head_dim 256 -13% without the padding).
KVATTN_HD inline int64_t section_slots(int64_t width, int64_t m_blocks, int64_t unit) {
  const int64_t tiles = width * m_blocks;
  return (tiles + unit - 1) / unit * unit;
}

// Every slot of `pairs` x `m_blocks` tiles in sections of `section` >= 1 pairs (the last one
// narrower when `section` does not divide `pairs`), each padded to a multiple of `unit`.
KVATTN_HD inline int64_t total_section_slots(int64_t pairs, int64_t m_blocks, int64_t section,
                                             int64_t unit) {
  const int64_t full = pairs / section;
  const int64_t rest = pairs - full * section;
  return full * section_slots(section, m_blocks, unit) +
         (rest > 0 ? section_slots(rest, m_blocks, unit) : 0);
}

// Slot t: sections in order; inside one, pairs fastest, then row blocks; the padding at a
// section's end has no tile. The valid slots map one to one onto pairs x row blocks.
// I: the integer type of the arithmetic. int32_t where every value fits (section_tile_fits:
// the kernel's consumers decode a tile between two tiles, on the tensor cores' critical path,
// and 64-bit divisions are long software sequences); int64_t otherwise.
template <typename I>
KVATTN_HD inline SectionTile section_tile_as(I t, I pairs, I m_blocks, I section, I unit) {
  const I per_section = (section * m_blocks + unit - 1) / unit * unit;  // slots of a full one
  const I first = t / per_section * section;  // the section's first pair
  const I r = t - t / per_section * per_section;
  const I rest = pairs - first;
  const I width = section < rest ? section : rest;  // pairs in this section
  SectionTile st;
  st.valid = r < width * m_blocks;
  if (st.valid) {
    st.pair = first + r % width;
    st.z = r / width;
  }
  return st;
}

KVATTN_HD inline SectionTile section_tile(int64_t t, int64_t pairs, int64_t m_blocks,
                                          int64_t section, int64_t unit) {
  return section_tile_as<int64_t>(t, pairs, m_blocks, section, unit);
}

// Whether section_tile_as<int32_t> is exact for every slot of a schedule of `total_slots`
// (total_section_slots) slots dealt by `unit`: every intermediate value is at most
// total_slots + unit.
KVATTN_HD inline bool section_tile_fits(int64_t total_slots, int64_t unit) {
  return total_slots + unit <= int64_t{INT32_MAX} / 2;
}

// Pairs per section: as many whole GQA groups (whole sequences, once a sequence fits) as keep
// the K and V of the section's KV heads within `budget_bytes` of L2, at least one group.
// kv_len: the longest sequence's keys (an estimate does: only the speed depends on it).
// budget_bytes <= 0: one section of every pair.
inline int64_t prefill_l2_section(int64_t num_seqs, int64_t num_heads, int64_t group,
                                  int64_t head_dim, int64_t kv_len, int64_t elem_bytes,
                                  int64_t budget_bytes) {
  const int64_t pairs = std::max<int64_t>(num_seqs * num_heads, 1);
  if (budget_bytes <= 0) return pairs;
  const int64_t kv_head_bytes = std::max<int64_t>(kv_len, 1) * head_dim * 2 * elem_bytes;
  const int64_t kv_heads = std::max<int64_t>(budget_bytes / kv_head_bytes, 1);
  int64_t section = kv_heads * std::max<int64_t>(group, 1);
  if (section >= num_heads) section = section / num_heads * num_heads;
  return std::clamp<int64_t>(section, 1, pairs);
}

// Whether a launch takes the dynamic schedule (CudaTuning::prefill_sm90_dynamic `mode` != 0):
// only in the handover form with one producer warp (the claimed tiles reach the consumers
// through the handover; further producer warps would walk the static list), on a schedule of
// at least `min_rounds` rounds of the persistent grid (num_tiles >= min_rounds * grid: over a
// few rounds the snake deal pairs heavy and light tiles better than claiming does, H200 session
// 24: 4x4096 9/3 d64, 6 rounds, 2.4-4% slower claimed; and a CTA needs a next tile to claim),
// whose tiles the grid's handover rings hold (num_tiles <= grid * (handover_slots - 2):
// for_each_claimed_tile), and a batch whose row blocks mostly have rows (total_q >= half of
// num_seqs * num_m_blocks * block_m rows): a slot without rows costs the producer a counter
// round trip where the static deal skips it for free (a varlen batch of one long and many
// short sequences). num_tiles and grid are the claimed schedule's (prefill_sm90_schedule with
// claimed = true).
KVATTN_HD inline bool prefill_sm90_claims_tiles(int mode, int producer_warps, int64_t total_q,
                                                int64_t num_seqs, int64_t num_m_blocks,
                                                int block_m, int64_t num_tiles, int64_t grid,
                                                int handover_slots, int min_rounds) {
  if (mode == 0 || producer_warps != 1 || grid <= 0 || grid >= num_tiles) return false;
  if (num_tiles < static_cast<int64_t>(min_rounds) * grid) return false;
  if (num_tiles > int64_t{INT32_MAX} || num_tiles > grid * (handover_slots - 2)) return false;
  return 2 * total_q >= num_seqs * num_m_blocks * block_m;
}

}  // namespace kvattn::cuda::sm90

#undef KVATTN_HD
