// The merge kernels of the split kernel's stream mode: combine the pieces of each sequence that
// a range boundary cut (normalized partials + log2-LSE in the workspace). merge_kernel reads
// them after the split kernel completed; merge_polled_kernel (p.merge_poll) waits for each
// piece's tag instead, so that it merges while the split kernel's last CTAs still run.
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_stream_ranges.h"

namespace kvattn::cuda {
namespace {

// ---- the arithmetic of one output row, shared by both kernels ----------------------------------

// One warp's share of a row's merge: pieces sub, sub + wpr, ... of the row's n pieces (piece j's
// row at workspace index wi0 + j * wstep), in batches of kUnroll whose LSEs and partials are
// loaded together (one round trip a batch): a running max over the batches (every lane loads
// every LSE of its batch, so the max is the warp's without a shuffle), the sum and the
// accumulator rescaled when it grows. With one batch (the usual case: n <= kUnroll x wpr) this
// is the arithmetic of a max over all the pieces first, bit for bit. L2 loads (ld.cg): the
// polled kernel reads pieces written while it runs, which no L1 line may hold stale.
template <int D>
__device__ __forceinline__ void merge_row_pieces(const DecodeParams& p, int64_t wi0,
                                                 int64_t wstep, int n, int sub, int wpr, int lane,
                                                 float& mx, float& wsum, float (&acc)[D / 32]) {
  constexpr int kPer = D / 32;  // floats per lane
  constexpr int kUnroll = 8;    // loads in flight per warp
  mx = kNegInf;
  wsum = 0.0f;
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  for (int j0 = sub; j0 < n; j0 += kUnroll * wpr) {
    float lse[kUnroll];
    float x[kUnroll][kPer];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * wpr;
      lse[u] = kNegInf;
#pragma unroll
      for (int e = 0; e < kPer; ++e) x[u][e] = 0.0f;
      if (j < n) {
        const int64_t wi = wi0 + j * wstep;
        lse[u] = __ldcg(p.ws_lse + wi);
        const float* src = p.ws_o + wi * D + lane * kPer;
        if constexpr (kPer % 4 == 0) {  // head_dim 128, 256
#pragma unroll
          for (int q4 = 0; q4 < kPer / 4; ++q4) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(src + 4 * q4));
            x[u][4 * q4] = v.x;
            x[u][4 * q4 + 1] = v.y;
            x[u][4 * q4 + 2] = v.z;
            x[u][4 * q4 + 3] = v.w;
          }
        } else {  // head_dim 64
          static_assert(kPer == 2, "merge: head_dim 64, 128 or 256");
          const float2 v = __ldcg(reinterpret_cast<const float2*>(src));
          x[u][0] = v.x;
          x[u][1] = v.y;
        }
      }
    }
    float bm = mx;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) bm = fmaxf(bm, lse[u]);
    if (bm == kNegInf) continue;  // no piece so far saw a key
    if (bm > mx) {  // mx == -inf: acc and wsum are still 0, the factor 0 keeps them so
      const float c = mx == kNegInf ? 0.0f : fast_exp2(mx - bm);
      wsum *= c;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] *= c;
      mx = bm;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float f = lse[u] == kNegInf ? 0.0f : fast_exp2(lse[u] - mx);
      wsum += f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] += f * x[u][e];
    }
  }
}

// Combines the wpr warps of each row (consecutive warps, sub = warp % wpr) into the row's first
// warp through shared memory. Every thread of the CTA calls it (one __syncthreads).
template <int D>
__device__ __forceinline__ void merge_combine_warps(float (*red)[D + 4], int warp, int sub,
                                                    int wpr, int lane, float& mx, float& wsum,
                                                    float (&acc)[D / 32]) {
  constexpr int kPer = D / 32;
  if (lane == 0) {
    red[warp][D] = mx;
    red[warp][D + 1] = wsum;
  }
#pragma unroll
  for (int e = 0; e < kPer; ++e) red[warp][lane * kPer + e] = acc[e];
  __syncthreads();
  if (sub != 0) return;
  float gm = kNegInf;
  for (int w = 0; w < wpr; ++w) gm = fmaxf(gm, red[warp + w][D]);
  wsum = 0.0f;
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  if (gm != kNegInf) {
    for (int w = 0; w < wpr; ++w) {
      const float wm = red[warp + w][D];
      const float f = wm == kNegInf ? 0.0f : fast_exp2(wm - gm);
      wsum += f * red[warp + w][D + 1];
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] += f * red[warp + w][lane * kPer + e];
    }
  }
  mx = gm;
}

// Writes the merged row (token, head): out in T, lse (natural log) where asked.
template <typename T, int D>
__device__ __forceinline__ void merge_store_row(const DecodeParams& p, int64_t token, int head,
                                                float mx, float wsum, const float (&acc)[D / 32],
                                                int lane) {
  constexpr int kPer = D / 32;
  const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
  uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                  static_cast<int64_t>(head) * mem_head_dim<D>(p) + lane * kPer;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    if (lane * kPer + e < mem_head_dim<D>(p)) dst[e] = to_bits<T>(acc[e] * inv);  // padded tiles
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[head * p.lse_head_stride + token] =
        wsum > 0.0f ? (mx + __log2f(wsum)) * 0.69314718055994531f : kNegInf;
  }
}

// ---- merge_kernel: wpr warps per output row, after the split kernel ---------------------------
template <typename T, int D>
__global__ void __launch_bounds__(256) merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kPer = D / 32;
  // Launched with PDL (p.merge_pdl): the split kernel's pieces are complete and visible only
  // after this wait (a plain launch returns from it at once).
  ptx::grid_dependency_wait();
  __shared__ float red[8][D + 4];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int wpr = p.merge_wpr;
  const int sub = warp % wpr;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * (8 / wpr) + warp / wpr;
  const int64_t total = static_cast<int64_t>(p.num_seqs) * p.q_len * p.num_heads;
  int n = 0, slot0 = 0, head = 0, kvh = 0, r = 0;
  int64_t token = 0;
  if (row_id < total) {
    head = static_cast<int>(row_id % p.num_heads);
    token = row_id / p.num_heads;
    const int b = static_cast<int>(token / p.q_len);
    const int i = static_cast<int>(token - static_cast<int64_t>(b) * p.q_len);
    slot0 = p.ws_meta[2 * b];
    n = p.ws_meta[2 * b + 1];
    kvh = head / p.group;
    r = i * p.group + (head - kvh * p.group);
  }
  const int64_t wi0 = (static_cast<int64_t>(slot0) * p.num_kv_heads + kvh) * p.rows + r;
  const int64_t wstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;
  float mx, wsum, acc[kPer];
  merge_row_pieces<D>(p, wi0, wstep, n >= 2 ? n : 0, sub, wpr, lane, mx, wsum, acc);
  if (wpr > 1) merge_combine_warps<D>(red, warp, sub, wpr, lane, mx, wsum, acc);
  if (sub != 0 || n < 2) return;
  merge_store_row<T, D>(p, token, head, mx, wsum, acc, lane);
}

// ---- merge_polled_kernel: one CTA a (sequence, unit), polling its pieces' tags ---------------
// CTA b x units + unit merges the rows of unit (kvh, rc) of sequence b, if a range boundary cut
// b: its warps take rows_per_pass = warps / wpr rows at a time, wpr warps a row. Launched by
// PDL while the split kernel runs (every split CTA has consented, so every split CTA is
// resident or done and no merge CTA can hold an SM a split CTA waits for). It computes b's
// pieces from the lengths as the split kernel did (the split read them before its own PDL
// wait, so they are final), waits for every piece's tag (warp 0), stores the tag as the next
// gen, merges and writes out. Before it exits it waits for the split grid's completion, so
// that this grid never completes before the split kernel (a successor that waits for the merge
// then sees the split's direct outputs too). A piece still missing after kMaxPolls polls is
// awaited through that wait and looked for once more: only then is the fault recorded.
template <typename T, int D>
__global__ void __launch_bounds__(256) merge_polled_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kPer = D / 32;
  __shared__ float red[8][D + 4];
  __shared__ int sums[8][3];
  __shared__ int arrived_all;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int units = p.num_kv_heads * p.row_chunks;
  const int b = static_cast<int>(blockIdx.x / units);
  const int unit = static_cast<int>(blockIdx.x - static_cast<int64_t>(b) * units);
  const int kvh = unit / p.row_chunks;
  const int rc = unit - kvh * p.row_chunks;

  // Tiles before b, b's tiles and the batch's: the split kernel's prefix sum at b.
  int before = 0, mine = 0, all = 0;
  for (int s = threadIdx.x; s < p.num_seqs; s += blockDim.x) {
    const int t = tiles_of(seq_len(p, s, false));
    all += t;
    if (s < b) before += t;
    if (s == b) mine = t;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    before += __shfl_xor_sync(0xffffffffu, before, off);
    mine += __shfl_xor_sync(0xffffffffu, mine, off);
    all += __shfl_xor_sync(0xffffffffu, all, off);
  }
  if (lane == 0) {
    sums[warp][0] = before;
    sums[warp][1] = mine;
    sums[warp][2] = all;
  }
  __syncthreads();
  before = mine = all = 0;
  for (int w = 0; w < warps; ++w) {
    before += sums[w][0];
    mine += sums[w][1];
    all += sums[w][2];
  }
  int pieces = 0;
  int64_t slot0 = 0;
  if (mine > 0) {
    const StreamRanges ranges = StreamRanges::make(all, p.parts, p.part_cap, false);
    const int r0 = ranges.of_tile(before);
    pieces = ranges.of_tile(before + mine - 1) - r0 + 1;
    slot0 = static_cast<int64_t>(r0) + b;
  }
  if (pieces >= 2) {  // CTA-uniform
    if (warp == 0) {
      uint32_t* const gen_word = piece_gen_word(p, b, kvh, rc);
      const uint32_t tag =
          ll_tag_after(__shfl_sync(0xffffffffu, lane == 0 ? ld_relaxed_u32(gen_word) : 0u, 0),
                       p.epoch);
      bool ok = true;
      for (int j = lane; j < pieces; j += 32) {
        const uint32_t* const flag = piece_flag(p, slot0 + j, kvh, rc);
        unsigned sleep_ns = 32;
        for (int polls = 0; ok && ld_acquire_u32(flag) != tag; ++polls) {
          ok = polls < kMaxPolls;
          __nanosleep(sleep_ns);
          sleep_ns = sleep_ns < 512 ? 2 * sleep_ns : 512;
        }
      }
      if (!__all_sync(0xffffffffu, ok)) {  // the split grid's end, then one more look
        ptx::grid_dependency_wait();
        ok = true;
        for (int j = lane; j < pieces; j += 32) {
          ok = ok && ld_acquire_u32(piece_flag(p, slot0 + j, kvh, rc)) == tag;
        }
        ok = __all_sync(0xffffffffu, ok);
        if (!ok && lane == 0) record_fault(p.fault_word, kFaultDecodeMergeStalled);
      }
      // Every piece's writer read the gen word before it tagged: the next launch's chain.
      if (ok && lane == 0) st_relaxed_u32(gen_word, tag);
      if (lane == 0) arrived_all = ok ? 1 : 0;
    }
    __syncthreads();  // warp 0's acquires before any warp reads the pieces
    if (arrived_all != 0) {
      const int wpr = p.merge_wpr;
      const int sub = warp % wpr;
      const int per_pass = warps / wpr;
      const int r_begin = rc * p.unit_rows;
      const int r_end = min(p.rows, r_begin + p.unit_rows);
      const int64_t wstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;
      for (int pass = r_begin; pass < r_end; pass += per_pass) {  // CTA-uniform trips
        const int r = pass + warp / wpr;
        const bool has = warp / wpr < per_pass && r < r_end;
        const int64_t wi0 = (slot0 * p.num_kv_heads + kvh) * p.rows + r;
        float mx, wsum, acc[kPer];
        merge_row_pieces<D>(p, wi0, wstep, has ? pieces : 0, sub, wpr, lane, mx, wsum, acc);
        if (wpr > 1) merge_combine_warps<D>(red, warp, sub, wpr, lane, mx, wsum, acc);
        if (has && sub == 0) {
          const int i = r / p.group;
          merge_store_row<T, D>(p, static_cast<int64_t>(b) * p.q_len + i,
                                kvh * p.group + (r - i * p.group), mx, wsum, acc, lane);
        }
        if (wpr > 1) __syncthreads();  // red is read before the next pass writes it
      }
    }
  }
  ptx::grid_dependency_wait();
}

}  // namespace
}  // namespace kvattn::cuda
