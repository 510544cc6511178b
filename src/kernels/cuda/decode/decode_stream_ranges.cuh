// The dynamic split's claims of stream mode's later ranges (decode_stream_ranges.h: the ranges
// and why).
//
// The claims: one counter a slice, a 64-bit word {tag, count} in the workspace, and the slice's
// gen word beside it. A launch's tag is the gen word as it starts. Every CTA claims with
// atomicAdd until a claim comes back empty, so a launch makes exactly ndyn + nstatic claims a
// slice; the last one (count ndyn + nstatic - 1) leaves the next launch's state: a fresh tag
// (a hash of this one, never equal to it) in the gen word and {that tag, 0} in the counter.
// So no launch zeroes the counter, graph replays included. Where the counter holds another
// tag (a workspace of garbage, or one another kernel or layout wrote since), CTA 0 of the
// slice installs {tag, 0} at its start with a CAS, and a claim that comes back with a stale
// tag waits for that and claims again; a leftover that matches the tag does so with odds
// 2^-32. (A CAS loop for every claim, session 37's first form, serialised the CTAs that finish
// their static ranges together: 64x4096 d128 ran 470 us instead of 376.)
// The warps of a CTA walk the same ranges: the CTA keeps its last kClaimRing claims in shared
// memory (ClaimRing); the first warp that needs entry k claims it, the others read it there.
#pragma once

#include <cstdint>

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_stream_ranges.h"

namespace kvattn::cuda {
namespace {

// A CTA's claims in shared memory: entry k (k >= 1; entry 0 is the CTA's static range) lives in
// slot k % kClaimRing while any warp still computes in it: a claimer of entry k first waits until
// every warp computes in entry k - kClaimRing + 1 or later (warp_entry; a warp's issue cursor
// runs at most two tiles, so at most three entries, ahead of its compute cursor: no wait in
// practice, and no cycle: the warps it waits for do not wait for it).
inline constexpr int kClaimRing = 8;
struct ClaimRing {
  int upto;                         // the highest entry a warp of the CTA began to claim
  int key[kClaimRing];              // the entry each slot holds (-1: none yet)
  int val[kClaimRing];              // its range (-1: none left)
  int warp_entry[kDecodeMaxWarps];  // the entry each warp computes in (INT_MAX: done, or no unit)
};
// Ints of shared memory a ClaimRing takes (decode_host::prefix_bytes_for's claim_ints).
static_assert(sizeof(ClaimRing) <= kDecodeClaimRingInts * sizeof(int), "ClaimRing's room");

__device__ __forceinline__ uint64_t ld_relaxed_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t claim_tag(const unsigned long long v) {
  return static_cast<uint32_t>(v >> 32);
}

// CTA 0 of a slice, one thread, after the PDL wait: {tag, 0} into a counter of another tag.
__device__ __forceinline__ void install_claim_counter(uint64_t* word) {
  const uint32_t tag = ld_relaxed_u32(reinterpret_cast<const uint32_t*>(word + 1));
  auto* const counter = reinterpret_cast<unsigned long long*>(word);
  unsigned long long cur = ld_relaxed_u64(word);
  while (claim_tag(cur) != tag) {
    const unsigned long long seen =
        atomicCAS(counter, cur, static_cast<unsigned long long>(tag) << 32);
    if (seen == cur) break;
    cur = seen;
  }
}

// One claim of the slice's counter (`word`: {counter, gen}): the next dynamic range, or -1
// when none is left (or, recorded as a fault, when the counter never showed this launch's
// tag). One thread.
__device__ __forceinline__ int claim_dynamic_range(uint64_t* word, const StreamRanges& s,
                                                   uint32_t* fault_word) {
  uint32_t* const gen = reinterpret_cast<uint32_t*>(word + 1);
  const uint32_t tag = ld_relaxed_u32(gen);
  auto* const counter = reinterpret_cast<unsigned long long*>(word);
  unsigned long long old = 0;
  for (int polls = 0;;) {
    old = atomicAdd(counter, 1ull);
    if (claim_tag(old) == tag) break;
    while (claim_tag(ld_relaxed_u64(word)) != tag) {  // CTA 0 installs the tag
      if (++polls >= kMaxPolls) {
        record_fault(fault_word, kFaultDecodeMergeStalled);
        return -1;
      }
    }
  }
  const auto mine = static_cast<uint32_t>(old);
  if (mine == static_cast<uint32_t>(s.ndyn + s.nstatic - 1)) {  // the launch's last claim
    const uint32_t next = ll_tag_after(tag, 0x2545f491u);
    atomicExch(counter, static_cast<unsigned long long>(next) << 32);
    st_relaxed_u32(gen, next);
  }
  return mine < static_cast<uint32_t>(s.ndyn) ? s.nstatic + static_cast<int>(mine) : -1;
}

// Entry k (>= 1) of the CTA's claims: claimed by the first warp that asks, read from shared
// memory by the others. Whole warp; the same value in every lane.
__device__ __forceinline__ int dynamic_entry(ClaimRing* ring, int k, uint64_t* word,
                                             const StreamRanges& s, uint32_t* fault_word,
                                             int lane) {
  int r = -1;
  if (lane == 0) {
    const int slot = k % kClaimRing;
    volatile int* const key = ring->key + slot;
    volatile int* const val = ring->val + slot;
    if (atomicCAS(&ring->upto, k - 1, k) == k - 1) {
      const volatile int* const we = ring->warp_entry;
      for (int w = 0; w < kDecodeMaxWarps; ++w) {
        while (we[w] <= k - kClaimRing) {
        }
      }
      r = claim_dynamic_range(word, s, fault_word);
      *val = r;
      __threadfence_block();
      *key = k;
    } else {
      while (*key != k) {
      }
      r = *val;
    }
  }
  return __shfl_sync(0xffffffffu, r, 0);
}

}  // namespace
}  // namespace kvattn::cuda
