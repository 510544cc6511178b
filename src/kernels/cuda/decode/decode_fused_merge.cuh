// The split kernel's merge inside the kernel (stream mode, p.fused_merge; decode_params.h): a
// sequence cut by range boundaries is computed in n pieces by n CTAs; each warp that writes a
// piece of (sequence b, its unit) to the workspace arrives on that unit's arrival word, and the
// warp that arrives last merges the n pieces of its rows and writes the output, so no merge
// kernel follows.
//
// Words (p.ws_sync; decode_merge_sync_bytes): per (sequence, KV head, 8-row group) a 64-bit
// arrival word (launch tag << 32 | arrivals) and a 32-bit gen word (the previous launch's
// tag), as the small kernel's LL merge chains its tags: every arriving warp reads the gen
// word before it arrives, its tag is ll_tag_after(gen, epoch) (never gen), and an arrival word
// carrying another tag counts as zero arrivals. The last arriver stores its tag as the next
// gen, after all n arrivals, so every reader of the gen word has read it before. Nothing needs
// zeroing between launches or graph replays; a stale word matches with odds 2^-32.
//
// Ordering: every lane fences (__threadfence) after its piece stores, the warp syncs, lane 0
// arrives with an atomic CAS; the last arriver fences again and reads the pieces from L2
// (ld.global.cg: they were written by other SMs during this launch).
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"

namespace kvattn::cuda {
namespace {

// The arrival word of (sequence b, KV head kvh, 8-row group g); its gen word follows it.
__device__ __forceinline__ unsigned long long* merge_sync_word(const DecodeParams& p, int b,
                                                               int kvh, int g) {
  const int groups = (p.rows + kDecodeSwapRows - 1) / kDecodeSwapRows;
  const int64_t idx = (static_cast<int64_t>(b) * p.num_kv_heads + kvh) * groups + g;
  return reinterpret_cast<unsigned long long*>(p.ws_sync + 2 * idx);
}

// Lane 0 of a warp whose piece of (b, kvh, group g) is stored and fenced: arrives, and returns
// whether it was the n-th (then this launch's tag is the next gen).
__device__ __forceinline__ bool merge_arrive(const DecodeParams& p, int b, int kvh, int g, int n) {
  unsigned long long* const word = merge_sync_word(p, b, kvh, g);
  auto* const gen_word = reinterpret_cast<uint32_t*>(word + 1);
  const uint32_t gen = __ldcg(gen_word);
  const uint32_t tag = ll_tag_after(gen, p.epoch);
  unsigned long long cur = __ldcg(word);
  for (;;) {
    const uint32_t count = static_cast<uint32_t>(cur >> 32) == tag ? static_cast<uint32_t>(cur) : 0u;
    const unsigned long long want = (static_cast<unsigned long long>(tag) << 32) | (count + 1u);
    const unsigned long long seen = atomicCAS(word, cur, want);
    if (seen == cur) {
      const bool last = static_cast<int>(count + 1u) >= n;
      if (last) __stcg(gen_word, tag);
      return last;
    }
    cur = seen;
  }
}

// The last arriver's merge of rows [r0, r1) of KV head kvh of sequence b from its n pieces in
// slots slot0 .. slot0 + n - 1 (the workspace layout of decode_params.h), as merge_kernel
// computes it: weights exp2(lse_j - max lse), output sum / weight sum in T, LSE in nats.
template <typename T, int D>
__device__ __forceinline__ void merge_rows(const DecodeParams& p, int b, int kvh, int r0, int r1,
                                           int slot0, int n, int lane) {
  constexpr int kPer = D / 32;  // floats per lane
  const int hd = mem_head_dim<D>(p);
  const int64_t wstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;
  for (int r = r0; r < r1; ++r) {
    const int64_t wi0 = (static_cast<int64_t>(slot0) * p.num_kv_heads + kvh) * p.rows + r;
    float mx = kNegInf;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, __ldcg(p.ws_lse + wi0 + j * wstep));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float acc[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
    float wsum = 0.0f;
    if (mx != kNegInf) {
      for (int j = 0; j < n; ++j) {
        const int64_t wi = wi0 + j * wstep;
        const float f = fast_exp2(__ldcg(p.ws_lse + wi) - mx);
        const float* src = p.ws_o + wi * D + lane * kPer;
        wsum += f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] += f * __ldcg(src + e);
      }
    }
    const int i = r / p.group;
    const int head = kvh * p.group + (r - i * p.group);
    const int64_t token = static_cast<int64_t>(b) * p.q_len + i;
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                    static_cast<int64_t>(head) * hd + lane * kPer;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      if (lane * kPer + e < hd) dst[e] = to_bits<T>(acc[e] * inv);  // padded tiles
    }
    if (p.lse != nullptr && lane == 0) {
      p.lse[head * p.lse_head_stride + token] =
          wsum > 0.0f ? (mx + __log2f(wsum)) * 0.69314718055994531f : kNegInf;
    }
  }
}

// Called by every lane of a warp after it stored its piece of sequence b (unit kvh,
// rows [r0, r1) of the unit_rows-row unit starting at r0), a piece cut by a range boundary:
// the n pieces of b sit in slots slot0 .. slot0 + n - 1. Arrives for each 8-row group of the
// unit; the warp that arrives last on a group merges that group's rows. The split kernel
// calls it after its main loop: inside the loop its registers joined the loop's (+40-60 a
// thread, cuobjdump --dump-resource-usage), costing the tiles their CTAs per SM.
template <typename T, int D>
__device__ __forceinline__ void merge_piece_if_last(const DecodeParams& p, int b, int kvh, int r0,
                                                    int unit_rows, int slot0, int n, int lane) {
  __threadfence();  // this lane's piece stores before the arrival (release)
  __syncwarp();
  const int r_end = min(r0 + unit_rows, p.rows);
  for (int g0 = r0; g0 < r_end; g0 += kDecodeSwapRows) {
    const int g = g0 / kDecodeSwapRows;
    bool last = false;
    if (lane == 0) last = merge_arrive(p, b, kvh, g, n);
    if (__shfl_sync(0xffffffffu, last ? 1 : 0, 0) != 0) {
      __threadfence();  // the other pieces' stores before these reads (acquire)
      merge_rows<T, D>(p, b, kvh, g0, min(g0 + kDecodeSwapRows, r_end), slot0, n, lane);
    }
  }
}

}  // namespace
}  // namespace kvattn::cuda
