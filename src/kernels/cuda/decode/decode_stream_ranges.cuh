// The dynamic split's claims of stream mode's later ranges (decode_stream_ranges.h: the ranges
// and why).
//
// The claims: one counter a slice, a 64-bit word {tag, count} in the workspace, and the slice's
// gen word beside it. A launch's tag is a hash of the gen word as it starts (never equal to
// it: a workspace filled with one byte value holds no valid counter). Every CTA claims with
// atomicAdd until a claim comes back empty, so a launch makes exactly ndyn + nstatic claims a
// slice; the last one (count ndyn + nstatic - 1) leaves the next launch's state: its tag in
// the gen word and {the hash of that, 0} in the counter. So no launch zeroes the counter,
// graph replays included. Where the counter holds another tag (a workspace of garbage, or one
// another kernel or layout wrote since), CTA 0 of the slice installs {tag, 0} at its start
// with a CAS, and a claim that comes back with a stale tag waits for that and claims again; a
// leftover that matches the tag does so with odds 2^-32. (A CAS loop for every claim, session
// 37's first form, serialised the CTAs that finish their static ranges together: 64x4096 d128
// ran 470 us instead of 376.)
// The warps of a CTA walk the same ranges: the CTA keeps its last kClaimRing claims in shared
// memory (ClaimRing); entry k + 1 is claimed ahead, by the first warp whose issue cursor enters
// entry k, so that the claim's round trip stalls that one warp while it has a range of tiles
// ahead, not every warp at the range's end (session 37's second form: +3-13%). Every access
// another warp may make at the same time is an atomic (racecheck clean).
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

// The launch's tag of the slice whose gen word is `gen` (the hash that the last claim of the
// previous launch also computed).
__device__ __forceinline__ uint32_t claim_launch_tag(const uint32_t* gen) {
  return ll_tag_after(ld_relaxed_u32(gen), 0x2545f491u);
}

// CTA 0 of a slice, one thread, after the PDL wait: {tag, 0} into a counter of another tag.
__device__ __forceinline__ void install_claim_counter(uint64_t* word) {
  const uint32_t tag = claim_launch_tag(reinterpret_cast<const uint32_t*>(word + 1));
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
  const uint32_t tag = claim_launch_tag(gen);
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
    st_relaxed_u32(gen, tag);
    atomicExch(counter, static_cast<unsigned long long>(ll_tag_after(tag, 0x2545f491u)) << 32);
  }
  return mine < static_cast<uint32_t>(s.ndyn) ? s.nstatic + static_cast<int>(mine) : -1;
}

// Shared-memory words other warps read or write concurrently: atomics only.
__device__ __forceinline__ int smem_load(int* p) { return atomicOr(p, 0); }

// Claims entry k (>= 1) of the CTA's ring where no warp began to: waits until no warp computes
// in the entry its slot held, claims, publishes. Lane 0.
__device__ __forceinline__ void claim_entry_if_first(ClaimRing* ring, int k, uint64_t* word,
                                                     const StreamRanges& s,
                                                     uint32_t* fault_word) {
  if (atomicCAS(&ring->upto, k - 1, k) != k - 1) return;  // begun by another warp
  const int slot = k % kClaimRing;
  for (int w = 0; w < kDecodeMaxWarps; ++w) {
    while (smem_load(ring->warp_entry + w) <= k - kClaimRing) {
    }
  }
  atomicExch(ring->val + slot, claim_dynamic_range(word, s, fault_word));
  atomicExch(ring->key + slot, k);  // (the value first: a reader checks the key, then reads it)
}

// Entry k (>= 1) of the CTA's claims, usually claimed ahead (claim_entry_if_first at entry
// k - 1); else claimed now by the first warp that asks. Also claims entry k + 1 ahead when the
// range continues. Whole warp; the same value in every lane.
__device__ __forceinline__ int dynamic_entry(ClaimRing* ring, int k, uint64_t* word,
                                             const StreamRanges& s, uint32_t* fault_word,
                                             int lane) {
  int r = -1;
  if (lane == 0) {
    claim_entry_if_first(ring, k, word, s, fault_word);
    const int slot = k % kClaimRing;
    while (smem_load(ring->key + slot) != k) {
    }
    r = smem_load(ring->val + slot);
    if (r >= 0) claim_entry_if_first(ring, k + 1, word, s, fault_word);
  }
  return __shfl_sync(0xffffffffu, r, 0);
}

}  // namespace
}  // namespace kvattn::cuda
