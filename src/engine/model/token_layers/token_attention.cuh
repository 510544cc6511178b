// The token kernel's attention (phases B and C of token_layers.h): one query token of one
// sequence over its L keys, GQA groups of up to kMaxGroup query heads per KV head.
//
// Work: every KV head's keys split into Pieces (plan_pieces); CTA b takes items b, b + n, ...
// (item = head * pieces + piece). An item's cached K/V rows go to shared memory by cp.async in
// rounds of kRoundKeys keys (the first round of the CTA's first item ahead of the phase:
// token_layers.cu, Params::prefetch, since the cache below this token does not change in the
// launch); the token's own key L - 1 is taken from the q/k norm + RoPE the item computes from
// qkv (and the piece 0 item writes it, with V, into the caches: qk_norm_rope_store_kv's bytes).
// Warps take keys w, w + 8, ... of a round, two at a time, with an online softmax in fp32
// (scores in log2 units), lanes holding D / 32 consecutive dims; the eight warps' states meet in
// shared memory and the item leaves (acc[D], max, sum) per query head in the workspace
// (workspace_acc / _ml). Phase C merges the pieces of every head in every CTA (the o_proj GEMV
// needs all of them) into bf16 rows.
//
// Layout of the attention area of shared memory (AttSmem, floats unless said): q[kMaxGroup][D]
// (rotated, bf16 values), knew[D], vnew[D], raw[kWarps][D] bf16 (a head's row from qkv),
// norm[kWarps][D] (norm_head's output), the token's RoPE cos and sin [D / 2] (rope_table, once
// a launch), the layer's q and k norm weights bf16 [D] each (staged in phase E before), the
// block ids of the CTA's first round (first_round_blocks, once a launch), then a union of the
// round's K and V rows (bf16 [kRoundKeys][D] each), the warps' states [kWarps][kMaxGroup][D + 2]
// and the merge's weights.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "engine/model/cuda_rope_math.cuh"
#include "engine/model/token_layers/token_params.cuh"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kvattn/kernels/device_faults.h"

namespace kvattn::cuda_model::token {

// (AttSmem, the layout above, and att_smem_bytes: token_split.h.)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The workspace: every piece's accumulators [max_pieces][nh][D], then its (max, sum) pairs
// [max_pieces][nh][2] (floats).
template <int D>
__device__ __forceinline__ float* workspace_acc(const Params& p, int piece) {
  return p.workspace + int64_t{piece} * p.nh * D;
}
__device__ __forceinline__ float* workspace_ml(const Params& p, int piece) {
  return p.workspace + int64_t{p.max_pieces} * p.nh * p.head_dim + int64_t{piece} * p.nh * 2;
}

// Keys [j0, j1) of KV head h: their K and V rows of the layer's caches into the round buffers
// (rows 0..), by cp.async (one commit group). The token's key (L - 1) is not read; a block id
// outside the table or the pool zero-fills its rows and records the fault. kElem: the cache
// element's bytes (1: float8_e4m3 codes, rows of D bytes packed from the buffers' start).
template <int D, int kElem>
__device__ __forceinline__ void load_round_rows(const Params& p, const TokenLayer& w, int h,
                                                int j0, int j1, int L, bf16* kr, bf16* vr,
                                                const int* blocks) {
  constexpr int row_bytes = D * kElem;
  constexpr int kChunks = row_bytes / 16;  // 16-byte pieces of a row
  const int n = (j1 - j0) * kChunks;
  const int64_t bs = p.block_size;
  // Warps 1-7 issue the copies (thread 0 arrives at the grid barriers: grid_barrier.cuh).
  for (int i = static_cast<int>(threadIdx.x) - 32; i >= 0 && i < 2 * n; i += kThreads - 32) {
    const bool is_v = i >= n;
    const int ii = is_v ? i - n : i;
    const int key = ii / kChunks, c = ii - key * kChunks;
    const int j = j0 + key;
    if (j >= L - 1) continue;
    const int64_t bi = j / bs;
    const int block = blocks != nullptr           ? blocks[key]
                      : bi < p.table_width ? __ldg(p.block_table + bi)
                                           : -1;
    char* dst = reinterpret_cast<char*>(is_v ? vr : kr) + key * row_bytes + c * 16;
    const bool ok = block >= 0 && block < p.num_blocks;
    if (!ok && c == 0 && !is_v) {
      cuda::record_fault(p.fault_word,
                         bi < p.table_width ? kFaultBlockOutOfRange : kFaultSeqlenOutOfRange);
    }
    const char* base = static_cast<const char*>(is_v ? w.v_cache : w.k_cache);
    const int64_t stride = is_v ? w.v_block_stride : w.k_block_stride;  // elements
    const char* src =
        ok ? base + (int64_t{block} * stride + ((j - bi * bs) * p.nkv + h) * D) * kElem + c * 16
           : base;
    cuda::ptx::cp_async_16(cuda::ptx::smem_addr(dst), src, ok);
  }
  cuda::ptx::cp_async_commit();
}

// load_round_rows for the layer's cache (w.k_scale set: float8_e4m3).
template <int D>
__device__ __forceinline__ void load_round(const Params& p, const TokenLayer& w, int h, int j0,
                                           int j1, int L, bf16* kr, bf16* vr,
                                           const int* blocks = nullptr) {
  if (w.k_scale != nullptr) {
    load_round_rows<D, 1>(p, w, h, j0, j1, L, kr, vr, blocks);
  } else {
    load_round_rows<D, 2>(p, w, h, j0, j1, L, kr, vr, blocks);
  }
}

// The block id of each key of the CTA's first round (keys [j0, j1)), once a launch: the table
// and the length do not change during it, so phase A's K/V copies need no dependent load.
__device__ __forceinline__ void first_round_blocks(const Params& p, int j0, int j1, int* blocks) {
  for (int t = threadIdx.x; t < j1 - j0; t += kThreads) {
    const int64_t bi = (j0 + t) / p.block_size;
    blocks[t] = bi < p.table_width ? __ldg(p.block_table + bi) : -1;
  }
}

// The token's RoPE cos and sin for every pair (rope_cos_sin: the same bits as rope_pair), once
// a launch (every layer rotates at the same position with the same table).
template <int D>
__device__ __forceinline__ void rope_table(const Params& p, uint8_t* att) {
  using S = AttSmem<D>;
  float* rc = reinterpret_cast<float*>(att + S::kRope);
  const float pos = static_cast<float>(__ldg(p.position));
  for (int i = threadIdx.x; i < p.rotary_dim / 2; i += kThreads) {
    rope_cos_sin(i, p.rotary_dim, pos, p.rope_base, p.inv_freq, p.attention_factor, rc[i],
                 rc[D / 2 + i]);
  }
}

// A float8_e4m3 cache code's value before its scale: exact for every finite code, NaN for the
// NaN codes (as the decode kernels' hardware conversion reads them).
__device__ __forceinline__ float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// What a later step reads back of x from the cache: x itself (bf16 caches, scale < 0; the
// cache holds x), or code x scale, where code is the e4m3 code of x / scale that a float8_e4m3
// cache holds (cuda_rope_math.cuh to_cache, store_kv's bytes).
struct CacheValue {
  float read;
  uint8_t code;  // float8_e4m3 caches only
};
__device__ __forceinline__ CacheValue cache_value(bf16 x, float scale) {
  CacheValue c{};
  if (scale < 0.0f) {
    c.read = f(x);
  } else {
    c.code = to_cache<uint8_t>(x, scale);
    c.read = e4m3_value(c.code) * scale;
  }
  return c;
}

// The group's query heads of KV head h normed and rotated into q (floats of the bf16 values
// qk_norm_rope leaves), the token's key into knew and its value into vnew; the piece 0 item
// also writes the key and value rows into the caches at the token's slot. float8_e4m3 caches:
// knew and vnew hold what the cache then holds (code x scale), as a later step reads them.
template <int D>
__device__ __forceinline__ void prepare_token(const Params& p, const TokenLayer& w, int h,
                                              bool store, uint8_t* att) {
  using S = AttSmem<D>;
  float* q = reinterpret_cast<float*>(att + S::kQ);
  float* knew = reinterpret_cast<float*>(att + S::kKnew);
  float* vnew = reinterpret_cast<float*>(att + S::kVnew);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  bf16* raw = reinterpret_cast<bf16*>(att + S::kRaw) + warp * D;
  float* s = reinterpret_cast<float*>(att + S::kNorm) + warp * D;
  const float* rc = reinterpret_cast<const float*>(att + S::kRope);
  const float* rs = rc + D / 2;
  const bf16* qn = reinterpret_cast<const bf16*>(att + S::kQkNorm);
  const int R = p.rotary_dim;
  const bool fp8 = w.k_scale != nullptr;
  const float ks = fp8 ? w.k_scale[h] : -1.0f;  // cache_value's scale (< 0: a bf16 cache)
  const float vs = fp8 ? w.v_scale[h] : -1.0f;
  const int64_t elem = fp8 ? 1 : 2;  // bytes a cache element
  for (int hh = warp; hh <= p.group; hh += kWarps) {
    const bool is_k = hh == p.group;
    const int head = is_k ? p.nh + h : h * p.group + hh;
    const bf16* src = p.qkv + int64_t{head} * D;
    if (lane < D / 8) {
      *reinterpret_cast<uint4*>(raw + lane * 8) = ld_cg16(src + lane * 8);
    }
    __syncwarp();
    norm_head(raw, w.q_norm == nullptr ? nullptr : qn + (is_k ? D : 0), p.eps, D, s, lane);
    float* out = is_k ? knew : q + hh * D;
    char* kdst = nullptr;  // the token's rows in the caches (bytes)
    char* vdst = nullptr;
    if (is_k && store) {
      const int64_t slot = __ldg(p.slot);
      const int64_t num_slots = p.num_blocks * p.block_size;
      if (slot >= num_slots) {
        if (h == 0 && lane == 0) cuda::record_fault(p.fault_word, kFaultSlotOutOfRange);
      } else if (slot >= 0) {
        const int64_t block = slot / p.block_size;
        const int64_t row = (slot - block * p.block_size) * p.nkv * D + int64_t{h} * D;
        kdst = static_cast<char*>(w.k_cache) + (block * w.k_block_stride + row) * elem;
        vdst = static_cast<char*>(w.v_cache) + (block * w.v_block_stride + row) * elem;
      }
    }
    // Element i of the row: a query's value, or the key's as the cache keeps it (written
    // there by the storing item).
    auto put = [&](int i, bf16 x) {
      if (!is_k) {
        out[i] = f(x);
        return;
      }
      const CacheValue c = cache_value(x, ks);
      out[i] = c.read;
      if (kdst == nullptr) return;
      if (fp8) {
        reinterpret_cast<uint8_t*>(kdst)[i] = c.code;
      } else {
        reinterpret_cast<bf16*>(kdst)[i] = x;
      }
    };
    for (int i = lane; i < R / 2; i += 32) {
      int ia, ib;
      bf16 oa, ob;
      pair_of(i, R, p.interleaved != 0, ia, ib);
      rotate(s[ia], s[ib], rc[i], rs[i], oa, ob);  // rope_pair's arithmetic, table from rope_table
      put(ia, oa);
      put(ib, ob);
    }
    for (int i = R + lane; i < D; i += 32) put(i, __float2bfloat16(s[i]));  // partial rotary
    if (is_k) {
      const bf16* vsrc = p.qkv + int64_t{p.nh + p.nkv + h} * D;
      if (lane < D / 8) {
        const uint4 v = ld_cg16(vsrc + lane * 8);
        if (!fp8) {
          float f[8];
          to_f8(v, f);
#pragma unroll
          for (int e = 0; e < 8; ++e) vnew[lane * 8 + e] = f[e];
          if (vdst != nullptr) *reinterpret_cast<uint4*>(vdst + lane * 16) = v;
        } else {
          const bf16* x = reinterpret_cast<const bf16*>(&v);
          uint32_t codes[2] = {0u, 0u};
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const CacheValue c = cache_value(x[e], vs);
            vnew[lane * 8 + e] = c.read;
            codes[e / 4] |= static_cast<uint32_t>(c.code) << (8 * (e % 4));
          }
          if (vdst != nullptr) {
            *reinterpret_cast<uint2*>(vdst + lane * 8) = make_uint2(codes[0], codes[1]);
          }
        }
      }
    }
    __syncwarp();
  }
  __syncthreads();
}

// One warp's online-softmax state for the group's G heads (lane: dims lane * E .. + E).
template <int D, int G>
struct WarpState {
  static constexpr int kE = D / 32;
  float q[G][kE];
  float acc[G][kE];
  float m[G], l[G];
};

// A key's row for this lane: kE floats of the round's bf16 row, or (kFp8) of its float8_e4m3
// codes times `scale` (load_round's D-byte rows), or of knew / vnew for the token's own key, or
// zeros past the round.
template <int D, bool kFp8>
__device__ __forceinline__ void key_row(int j, int j0, int j1, int L, const bf16* buf,
                                        float scale, const float* fresh, int lane,
                                        float (&x)[D / 32]) {
  constexpr int E = D / 32;
  if (j >= j1) {
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = 0.0f;
  } else if (j == L - 1) {
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = fresh[lane * E + e];
  } else if constexpr (kFp8) {
    const uint8_t* r = reinterpret_cast<const uint8_t*>(buf) + (j - j0) * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = e4m3_value(r[e]) * scale;
  } else {
    const bf16* r = buf + (j - j0) * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = f(r[e]);
  }
}

// Keys [j0, j1) (the round in kr / vr from row 0; key L - 1 from knew / vnew): warp w takes
// keys j0 + w, j0 + w + 8, ..., two at a time (keys a and b = a + 8), so that the 2G dot
// products' shuffle chains overlap. kFp8: float8_e4m3 rounds, whose KV head's scales are ks / vs.
template <int D, int G, bool kFp8>
__device__ __forceinline__ void attend_round(const Params& p, int j0, int j1, int L,
                                             const bf16* kr, const bf16* vr, float ks, float vs,
                                             const float* knew, const float* vnew,
                                             WarpState<D, G>& st) {
  constexpr int E = D / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int ja = j0 + warp; ja < j1; ja += 2 * kWarps) {
    const int jb = ja + kWarps;
    float ka[E], va[E], kb[E], vb[E];
    key_row<D, kFp8>(ja, j0, j1, L, kr, ks, knew, lane, ka);
    key_row<D, kFp8>(ja, j0, j1, L, vr, vs, vnew, lane, va);
    key_row<D, kFp8>(jb, j0, j1, L, kr, ks, knew, lane, kb);
    key_row<D, kFp8>(jb, j0, j1, L, vr, vs, vnew, lane, vb);
    float sa[G], sb[G];
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      float da = 0.0f, db = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        da = fmaf(st.q[hh][e], ka[e], da);
        db = fmaf(st.q[hh][e], kb[e], db);
      }
      sa[hh] = da;
      sb[hh] = db;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int hh = 0; hh < G; ++hh) {
        sa[hh] += __shfl_xor_sync(0xffffffffu, sa[hh], o);
        sb[hh] += __shfl_xor_sync(0xffffffffu, sb[hh], o);
      }
    }
    const bool has_b = jb < j1;
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      const float a = sa[hh] * p.scale_log2;
      const float bsc = has_b ? sb[hh] * p.scale_log2 : -INFINITY;
      const float m = fmaxf(st.m[hh], fmaxf(a, bsc));
      const float corr = exp2f(st.m[hh] - m);
      const float pa = exp2f(a - m);
      const float pb = exp2f(bsc - m);
      st.l[hh] = st.l[hh] * corr + pa + pb;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        st.acc[hh][e] = fmaf(pb, vb[e], fmaf(pa, va[e], st.acc[hh][e] * corr));
      }
      st.m[hh] = m;
    }
  }
}

// Phase B: every item of this CTA. `ahead`: round 0 of item blockIdx.x was issued before the
// phase (token_layers.cu, Params::prefetch).
template <int D, int G>
__device__ __forceinline__ void attention_items(const Params& p, const TokenLayer& w, int L,
                                                Pieces pc, uint8_t* att, int layer,
                                                bool ahead) {
  using S = AttSmem<D>;
  constexpr int E = D / 32;
  const float* q = reinterpret_cast<const float*>(att + S::kQ);
  const float* knew = reinterpret_cast<const float*>(att + S::kKnew);
  const float* vnew = reinterpret_cast<const float*>(att + S::kVnew);
  bf16* kr = reinterpret_cast<bf16*>(att + S::kUnion);
  bf16* vr = kr + kRoundKeys * D;
  float* states = reinterpret_cast<float*>(att + S::kUnion);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = p.group;
  for (int item = blockIdx.x; item < pc.items; item += gridDim.x) {
    const int h = item / pc.pieces, piece = item - h * pc.pieces;
    const int k0 = min(L, piece * pc.chunk), k1 = min(L, k0 + pc.chunk);
    prepare_token<D>(p, w, h, piece == 0, att);
    if (item == static_cast<int>(blockIdx.x)) stamp(p, layer, kStampB1);
    const float ks = w.k_scale != nullptr ? w.k_scale[h] : 1.0f;  // fp8 rounds' scales
    const float vs = w.k_scale != nullptr ? w.v_scale[h] : 1.0f;
    WarpState<D, G> st;
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      st.m[hh] = -INFINITY;
      st.l[hh] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        st.acc[hh][e] = 0.0f;
        st.q[hh][e] = q[hh * D + lane * E + e];
      }
    }
    for (int j0 = k0; j0 < k1; j0 += kRoundKeys) {
      const int j1 = min(k1, j0 + kRoundKeys);
      const bool issued = ahead && item == static_cast<int>(blockIdx.x) && j0 == k0;
      if (!issued) load_round<D>(p, w, h, j0, j1, L, kr, vr);
      cuda::ptx::cp_async_wait<0>();
      __syncthreads();
      if (w.k_scale != nullptr) {
        attend_round<D, G, true>(p, j0, j1, L, kr, vr, ks, vs, knew, vnew, st);
      } else {
        attend_round<D, G, false>(p, j0, j1, L, kr, vr, ks, vs, knew, vnew, st);
      }
      __syncthreads();  // the buffers are refilled (or hold the states) next
    }
    if (k0 >= k1) {  // an empty piece still drains round 0's (empty) group
      cuda::ptx::cp_async_wait<0>();
      __syncthreads();
    }
    // The warps' states, then their merge into the item's piece in the workspace.
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      float* sw = states + (warp * kMaxGroup + hh) * (D + 2);
#pragma unroll
      for (int e = 0; e < E; ++e) sw[lane * E + e] = st.acc[hh][e];
      if (lane == 0) {
        sw[D] = st.m[hh];
        sw[D + 1] = st.l[hh];
      }
    }
    __syncthreads();
    float* acc_out = workspace_acc<D>(p, piece) + int64_t{h} * g * D;
    float* ml_out = workspace_ml(p, piece) + int64_t{h} * g * 2;
    for (int i = threadIdx.x; i < g * (D + 2); i += kThreads) {
      const int hh = i / (D + 2), d = i - hh * (D + 2);
      float M = -INFINITY;
      for (int ww = 0; ww < kWarps; ++ww) M = fmaxf(M, states[(ww * kMaxGroup + hh) * (D + 2) + D]);
      float sum = 0.0f;
      if (M != -INFINITY) {
        const int at = d < D ? d : D + 1;
        for (int ww = 0; ww < kWarps; ++ww) {
          const float* sw = states + (ww * kMaxGroup + hh) * (D + 2);
          if (sw[D + 1] > 0.0f) sum += sw[at] * exp2f(sw[D] - M);
        }
      }
      if (d < D) {
        acc_out[hh * D + d] = sum;
      } else {
        ml_out[hh * 2 + (d - D)] = d == D ? M : sum;
      }
    }
    __syncthreads();  // states (the round buffers) are reused by the next item
  }
}

// dst (bf16 [nq * D]) = the pieces of query heads [qh0, qh0 + nq) merged (zeros when L is 0):
// phase C of the five-phase kernel merges every head into xs, each CTA of the three-phase one
// the query head its o_proj share needs (token_flow.cu). First each (query head, piece)'s
// weight exp2(m - M) / sum over the head's pieces of l exp2(m - M) goes to shared memory (the
// round buffers, free by then); then each thread takes four consecutive outputs and reads
// their accumulators of every piece as float4s (16 pieces' loads in flight at a time).
template <int D>
__device__ __forceinline__ void merge_pieces(const Params& p, Pieces pc, int qh0, int nq,
                                             bf16* dst, uint8_t* att) {
  using S = AttSmem<D>;
  const int P = pc.pieces, n = nq * P;
  float* wt = reinterpret_cast<float*>(att + S::kUnion);  // [nq][P]: m, then the weight
  float* ls = wt + n;                                    // [nq][P]: l
  constexpr int kPc = 16;
  const int n4 = nq * D / 4;
  const int base4 = qh0 * D / 4;  // the first output's float4 within a piece's accumulators
  // The first output group's first kPc pieces, loaded beside the (max, sum) pairs: one L2 round
  // trip for both where the thread has one group and at most kPc pieces.
  float4 first[kPc];
#pragma unroll
  for (int u = 0; u < kPc; ++u) {
    first[u] = u < P && static_cast<int>(threadIdx.x) < n4
                   ? __ldcg(reinterpret_cast<const float4*>(workspace_acc<D>(p, u)) + base4 +
                            threadIdx.x)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int piece = i / nq, qh = i - piece * nq;
    const float2 v = __ldcg(reinterpret_cast<const float2*>(workspace_ml(p, piece)) + qh0 + qh);
    wt[qh * P + piece] = v.x;
    ls[qh * P + piece] = v.y;
  }
  __syncthreads();
  {  // a warp per query head, a lane per piece (P <= kMaxPiecesPerHead = 32)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int qh = warp; qh < nq; qh += kWarps) {
      const float l = lane < P ? ls[qh * P + lane] : 0.0f;
      const float m = l > 0.0f ? wt[qh * P + lane] : -INFINITY;
      float M = m;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
      const float e = l > 0.0f ? exp2f(m - M) : 0.0f;
      const float den = warp_sum(l * e);
      if (lane < P) wt[qh * P + lane] = l > 0.0f ? e / den : 0.0f;
    }
  }
  __syncthreads();
  for (int i4 = threadIdx.x; i4 < n4; i4 += kThreads) {
    const int qh = i4 * 4 / D;
    float4 out = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int p0 = 0; p0 < P; p0 += kPc) {
      float4 a[kPc];
      const bool loaded = i4 == static_cast<int>(threadIdx.x) && p0 == 0;
#pragma unroll
      for (int u = 0; u < kPc; ++u) {
        a[u] = loaded       ? first[u]
               : p0 + u < P ? __ldcg(reinterpret_cast<const float4*>(workspace_acc<D>(p, p0 + u)) +
                                     base4 + i4)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kPc; ++u) {
        const float w = p0 + u < P ? wt[qh * P + p0 + u] : 0.0f;
        out.x = fmaf(a[u].x, w, out.x);
        out.y = fmaf(a[u].y, w, out.y);
        out.z = fmaf(a[u].z, w, out.z);
        out.w = fmaf(a[u].w, w, out.w);
      }
    }
    __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst + i4 * 4);
    d2[0] = __floats2bfloat162_rn(out.x, out.y);
    d2[1] = __floats2bfloat162_rn(out.z, out.w);
  }
  __syncthreads();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace kvattn::cuda_model::token
