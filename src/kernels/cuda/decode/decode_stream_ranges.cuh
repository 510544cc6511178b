// The dynamic split's claims of stream mode's later ranges (decode_stream_ranges.h: the ranges
// and why).
//
// The claims: one counter a slice, a 64-bit word {tag, count} in the workspace, and the slice's
// gen word beside it (the last tag). A claim reads the gen word, derives the launch's tag
// (ll_tag_after, as the small kernel's LL words), and CASes the counter: a stale tag restarts
// the count at this claim. Every CTA claims until a claim comes back empty, so a launch makes
// exactly ndyn + nstatic claims a slice; the last one stores the tag as the gen word, after
// every other claim read it. So no launch needs the counter zeroed: the previous launch's word
// is always stale, in graph replays too, and a workspace of garbage matches with odds 2^-32.
// The warps of a CTA walk the same ranges: the CTA keeps its claims in a list in shared memory,
// the first warp that needs entry k claims it, the others read it there.
#pragma once

#include <cstdint>

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_stream_ranges.h"

namespace kvattn::cuda {
namespace {

// Shared-memory list states (a claimed entry holds the range index, or -1: none left).
inline constexpr int kClaimEmpty = -3;
inline constexpr int kClaimPending = -2;

__device__ __forceinline__ uint64_t ld_relaxed_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// One claim of the slice's counter (`word`: {counter, gen}): the next dynamic range, or -1
// when none is left. One thread.
__device__ __forceinline__ int claim_dynamic_range(uint64_t* word, const StreamRanges& s,
                                                   uint32_t epoch) {
  uint32_t* const gen = reinterpret_cast<uint32_t*>(word + 1);
  const uint32_t tag = ll_tag_after(ld_relaxed_u32(gen), epoch);
  auto* const counter = reinterpret_cast<unsigned long long*>(word);
  unsigned long long old = ld_relaxed_u64(word);
  uint32_t mine = 0;
  for (;;) {
    const bool fresh = static_cast<uint32_t>(old >> 32) == tag;
    mine = fresh ? static_cast<uint32_t>(old) : 0u;
    const unsigned long long next = (static_cast<unsigned long long>(tag) << 32) | (mine + 1u);
    const unsigned long long seen = atomicCAS(counter, old, next);
    if (seen == old) break;
    old = seen;
  }
  if (mine == static_cast<uint32_t>(s.ndyn + s.nstatic - 1)) {  // the launch's last claim
    __threadfence();
    st_relaxed_u32(gen, tag);
  }
  return mine < static_cast<uint32_t>(s.ndyn) ? s.nstatic + static_cast<int>(mine) : -1;
}

// Entry k of the CTA's list (k >= 1; entry 0 is the CTA's static range): claimed by the first
// warp that asks, read from shared memory by the others. Whole warp; the same value in every
// lane.
__device__ __forceinline__ int dynamic_entry(int* list, int k, uint64_t* word,
                                             const StreamRanges& s, uint32_t epoch, int lane) {
  int r = -1;
  if (lane == 0) {
    int* const e = list + (k - 1);
    if (atomicCAS(e, kClaimEmpty, kClaimPending) == kClaimEmpty) {
      r = claim_dynamic_range(word, s, epoch);
      atomicExch(e, r);
    } else {
      while ((r = *reinterpret_cast<volatile int*>(e)) == kClaimPending) {
      }
    }
  }
  return __shfl_sync(0xffffffffu, r, 0);
}

}  // namespace
}  // namespace kvattn::cuda
