// Stream mode's ranges (decode_params.h): the batch's concatenated tiles cut into ranges in
// position order. Plain C++ (host and device), so the CPU tests check the arithmetic without a
// GPU; the dynamic split's claims of the later ranges are in decode_stream_ranges.cuh.
//
// Static split (DecodeParams::dynamic_split == 0): `nstatic` equal ranges, one per resident CTA
// of a slice. Dynamic split: the same CTAs first take equal ranges of 3/4 of the tiles
// (kDynamicStaticWeight of kDynamicWeightSum), then the last quarter is cut into
// kDynamicTiers x nstatic ranges of decreasing size (a CTA's share times 1/8, 1/16, 1/32,
// 1/32, plus one tile each) that the CTAs claim as they finish, so that an SM that streams
// faster than the others (they differ by up to ~35%: docs/notes/decode-next.md "Session 36")
// takes more of them and no SM idles long at the end.
//
// A range's pieces: sequence b's tiles [prefix[b], prefix[b + 1]) meet ranges of_tile(first)
// .. of_tile(last), every one of them (ranges are contiguous and in position order), and the
// piece of (range r, sequence b) uses workspace slot r + b: unique, as a later range holds no
// earlier sequence, and below count() + num_seqs - 1.
#pragma once

#include <cstdint>

#include "kernels/cuda/decode/decode_params.h"

#if defined(__CUDACC__)
#define KVATTN_RANGES_HD __host__ __device__
#else
#define KVATTN_RANGES_HD
#endif

namespace kvattn::cuda {

inline constexpr int kDynamicStaticWeight = 24;  // a static range's weight ...
inline constexpr int kDynamicWeightSum = 32;     // ... of a CTA's share (static + its tiers)
// A range's weight in tier j: 4, 2, 1, 1 (the tiers sum to kDynamicWeightSum - 24).
KVATTN_RANGES_HD constexpr int dynamic_tier_weight(int j) { return j == 0 ? 4 : j == 1 ? 2 : 1; }
static_assert(kDynamicTiers == 4 &&
                  kDynamicStaticWeight + dynamic_tier_weight(0) + dynamic_tier_weight(1) +
                          dynamic_tier_weight(2) + dynamic_tier_weight(3) ==
                      kDynamicWeightSum,
              "a CTA's share: its static range and one range of each tier");

struct StreamRanges {
  int total = 0;    // tiles of the batch
  int nstatic = 1;  // the static ranges (0 .. nstatic - 1), one per CTA of the slice
  int ndyn = 0;     // the dynamic ranges (nstatic .. nstatic + ndyn - 1)

  KVATTN_RANGES_HD int count() const { return nstatic + ndyn; }

  // Weight of ranges [0, r) in units of 1 / kDynamicWeightSum of a CTA's share (dynamic).
  KVATTN_RANGES_HD int64_t weight_before(int r) const {
    if (r <= nstatic) return int64_t{kDynamicStaticWeight} * r;
    int64_t w = int64_t{kDynamicStaticWeight} * nstatic;
    int rest = r - nstatic;
    for (int j = 0; j < kDynamicTiers; ++j) {
      const int in_tier = rest < nstatic ? rest : nstatic;
      w += int64_t{dynamic_tier_weight(j)} * in_tier;
      rest -= in_tier;
    }
    return w;
  }

  // First tile of range r in [0, count()] (bound(count()) = total). Dynamic: every range holds
  // at least one tile (make() asks total >= count()), the rest is shared by weight.
  KVATTN_RANGES_HD int bound(int r) const {
    if (ndyn == 0) return static_cast<int>(static_cast<int64_t>(r) * total / nstatic);
    const int64_t spare = total - count();
    return r + static_cast<int>(spare * weight_before(r) /
                                (int64_t{kDynamicWeightSum} * nstatic));
  }

  // The range holding tile g (0 <= g < total).
  KVATTN_RANGES_HD int of_tile(int g) const {
    if (ndyn == 0) return static_cast<int>((static_cast<int64_t>(g + 1) * nstatic - 1) / total);
    int lo = 0, hi = count() - 1;  // the last r with bound(r) <= g
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (bound(mid) <= g) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  // The ranges of a batch of `total` tiles for `parts` CTAs a slice and a workspace of
  // `part_cap` ranges (>= 1): dynamic where asked, where the workspace holds its ranges and
  // where every range gets a tile; else one static range a CTA (fewer CTAs than `parts` when
  // the tiles or the workspace are fewer).
  KVATTN_RANGES_HD static StreamRanges make(int total, int parts, int part_cap, bool dynamic) {
    StreamRanges s;
    s.total = total;
    int n = parts < total ? parts : total;
    n = n < part_cap ? n : part_cap;
    s.nstatic = n > 1 ? n : 1;
    const int64_t ndyn = int64_t{kDynamicTiers} * s.nstatic;
    if (dynamic && s.nstatic + ndyn <= part_cap && total >= s.nstatic + ndyn) {
      s.ndyn = static_cast<int>(ndyn);
    }
    return s;
  }
};

}  // namespace kvattn::cuda
