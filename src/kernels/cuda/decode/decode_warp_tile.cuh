// One warp's work on one 16-key tile of the decode kernels: the copy of its K and V rows into
// a pipeline stage (issue_tile) and S = Q K^T, online softmax, O += P V over a landed stage
// (attend_tile), for 16-bit and float8_e4m3 caches.
#pragma once

#include "kernels/cuda/decode/decode_common.cuh"
#include "kernels/cuda/decode/decode_mask.cuh"

namespace kvattn::cuda {
namespace {

// Whether lane k's key of a tile (block id nid, in-block offset noff; -1: past the length) is
// copied: visited, and its block id in range (a visited key's bad id is recorded in the fault
// word). Lanes 0-15 hold the tile's keys; the ballot of the result has bit k for key k.
__device__ __forceinline__ bool tile_key_ok(const DecodeParams& p, int nid, int noff,
                                            int lane) {
  const bool in_range = noff >= 0;
  const bool id_ok = static_cast<unsigned>(nid) < static_cast<unsigned>(p.num_blocks);
  if (lane < kDecodeTileKeys && in_range && !id_ok) {
    record_fault(p.fault_word, kFaultBlockOutOfRange);
  }
  return in_range && id_ok;
}

// issue_tile's lean form over 16-byte aligned caches (its kLean): lane k < 16 turns key k's
// (block id, offset) into the byte offset of the key's row in each cache once, and every copy
// of the key's row takes it by a shuffle (whether the key is copied, from a ballot): a copy is
// then one or two shuffles, a 64-bit add and the cp.async, where issue_tile_by_copy derives the
// address per copy (two shuffles, the id check, 64-bit products for K and V: ~55 instructions;
// ncu, session 27: 4-8 copies a lane, over half of the tile's instructions at head_dim 64). A
// key not copied reads as offset 0, and a lane whose chunk lies past head_dim (a padded tile)
// as the row's start: addresses inside the cache, never read (the copy zero-fills). Faults as
// issue_tile_by_copy's.
template <typename KV, int D, bool kHint>
__device__ __forceinline__ void issue_tile_lean(const DecodeParams& p, uint32_t kdst, int nid,
                                                int noff, int lane, int kvh, uint64_t policy) {
  using L = KvTile<KV, D>;
  const int hd = mem_head_dim<D, static_cast<int>(sizeof(KV))>(p);
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * hd;
  const int copy_chunk = lane % L::kChunks;
  const int copy_key0 = lane / L::kChunks;
  const bool chunk_real = copy_chunk * L::kElemsPerChunk < hd;
  const int64_t head_off =
      chunk_real ? static_cast<int64_t>(kvh) * hd + copy_chunk * L::kElemsPerChunk : 0;
  const bool key_ok = tile_key_ok(p, nid, noff, lane);
  const uint32_t copied = __ballot_sync(0xffffffffu, key_ok);  // bit k: key k (lanes 0-15)
  const int64_t row = static_cast<int64_t>(noff) * kv_row;
  constexpr int64_t kBytes = sizeof(KV);
  const int64_t k_row = key_ok ? (static_cast<int64_t>(nid) * p.k_block_stride + row) * kBytes : 0;
  const char* const k_lane =
      reinterpret_cast<const char*>(static_cast<const KV*>(p.k_cache) + head_off);
  const char* const v_lane =
      reinterpret_cast<const char*>(static_cast<const KV*>(p.v_cache) + head_off);
  auto copy_rows = [&](auto same_strides) {
    constexpr bool kSame = decltype(same_strides)::value;
    [[maybe_unused]] int64_t v_row = 0;
    if constexpr (!kSame) {
      v_row = key_ok ? (static_cast<int64_t>(nid) * p.v_block_stride + row) * kBytes : 0;
    }
    // Not unrolled: unrolled, ptxas hoisted every copy's shuffles ahead of the first cp.async
    // and the kernels took up to 48 more registers (the swapped d64 tile 80 -> 128); a copy
    // costs a few instructions more this way.
#pragma unroll 1
    for (int i = 0; i < L::kCopies; ++i) {
      const int key_local = copy_key0 + i * L::kKeyStep;
      const int64_t ko = __shfl_sync(0xffffffffu, k_row, key_local);
      int64_t vo = ko;
      if constexpr (!kSame) vo = __shfl_sync(0xffffffffu, v_row, key_local);
      const bool ok = ((copied >> key_local) & 1u) != 0 && chunk_real;
      const uint32_t dst = L::addr(kdst, key_local, copy_chunk);
      if constexpr (kHint) {
        cp_async_16_hint(dst, k_lane + ko, ok, policy);
        cp_async_16_hint(dst + L::kTileBytes, v_lane + vo, ok, policy);
      } else {
        cp_async_16(dst, k_lane + ko, ok);
        cp_async_16(dst + L::kTileBytes, v_lane + vo, ok);
      }
    }
  };
  if (p.k_block_stride == p.v_block_stride) {  // the usual layout: one offset for both caches
    copy_rows(std::true_type{});
  } else {
    copy_rows(std::false_type{});
  }
}

// Copies one warp's K and V tile (kDecodeTileKeys keys of KV head kvh) into the stage at kdst.
// Key k's block id and in-block offset are lane k's (nid, noff); offset -1 (past the end) and
// bad block ids are zero-filled, and a bad id is recorded in the fault word; so are the chunks
// past p.head_dim of a padded tile (never read). kHint: the
// copies carry the L2 cache `policy` (the small kernel: l2_policy(p.kv_evict_first)); the
// stream kernel copies without one (the hinted form was 3% slower there on the H200).
template <typename KV, int D, bool kAligned16, bool kHint>
__device__ __forceinline__ void issue_tile_by_copy(const DecodeParams& p, uint32_t kdst, int nid,
                                                   int noff, int lane, int kvh,
                                                   uint64_t policy) {
  using L = KvTile<KV, D>;
  const KV* const k_cache = static_cast<const KV*>(p.k_cache);
  const KV* const v_cache = static_cast<const KV*>(p.v_cache);
  const int hd = mem_head_dim<D, static_cast<int>(sizeof(KV))>(p);
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * hd;
  const int copy_chunk = lane % L::kChunks;
  const int copy_key0 = lane / L::kChunks;
  const int64_t head_off = static_cast<int64_t>(kvh) * hd + copy_chunk * L::kElemsPerChunk;
  const bool chunk_real = copy_chunk * L::kElemsPerChunk < hd;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int key_local = copy_key0 + i * L::kKeyStep;
    const int id = __shfl_sync(0xffffffffu, nid, key_local);
    const int off = __shfl_sync(0xffffffffu, noff, key_local);
    const uint32_t dst = L::addr(kdst, key_local, copy_chunk);
    const bool in_range = off >= 0;
    const bool id_ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.num_blocks);
    if (in_range && !id_ok) record_fault(p.fault_word, kFaultBlockOutOfRange);
    const bool ok = in_range && id_ok && chunk_real;
    const int64_t row = ok ? static_cast<int64_t>(off) * kv_row + head_off : 0;
    const KV* ksrc = ok ? k_cache + id * p.k_block_stride + row : k_cache;
    const KV* vsrc = ok ? v_cache + id * p.v_block_stride + row : v_cache;
    if constexpr (kAligned16) {
      if constexpr (kHint) {
        cp_async_16_hint(dst, ksrc, ok, policy);
        cp_async_16_hint(dst + L::kTileBytes, vsrc, ok, policy);
      } else {
        cp_async_16(dst, ksrc, ok);
        cp_async_16(dst + L::kTileBytes, vsrc, ok);
      }
    } else if constexpr (kIsFp8<KV>) {  // fp8 caches not 16-byte aligned: byte loads
      st_shared_16(dst, ok ? load_16_bytes_unaligned(ksrc) : make_uint4(0, 0, 0, 0));
      st_shared_16(dst + L::kTileBytes, ok ? load_16_bytes_unaligned(vsrc) : make_uint4(0, 0, 0, 0));
    } else {  // caches only 2-byte aligned: stage the 8 elements through registers
      st_shared_16(dst, ok ? load_8_unaligned(ksrc) : make_uint4(0, 0, 0, 0));
      st_shared_16(dst + L::kTileBytes, ok ? load_8_unaligned(vsrc) : make_uint4(0, 0, 0, 0));
    }
  }
}

// The cp.async copy issue of a tile: issue_tile_by_copy, or with kIssue kLean (over aligned
// caches) issue_tile_lean: the same copies in fewer instructions, in kernels of their own
// (DecodeParams::lean_issue), so that the default kernels keep their registers. (kTma kernels
// issue through TmaRing, decode_tma.cuh.)
template <typename KV, int D, bool kAligned16, bool kHint, CopyIssue kIssue = CopyIssue::kByCopy>
__device__ __forceinline__ void issue_tile(const DecodeParams& p, uint32_t kdst, int nid,
                                           int noff, int lane, int kvh, uint64_t policy) {
  static_assert(kIssue != CopyIssue::kTma, "the TMA form issues through TmaRing");
  if constexpr (kAligned16 && kIssue == CopyIssue::kLean) {
    issue_tile_lean<KV, D, kHint>(p, kdst, nid, noff, lane, kvh, policy);
  } else {
    issue_tile_by_copy<KV, D, kAligned16, kHint>(p, kdst, nid, noff, lane, kvh, policy);
  }
}

// One warp's step over a landed 16-key tile at kbase (V at kbase + kTileBytes): S = Q K^T,
// causal mask (key j visible to row hr iff j < limit[hr]), online softmax in the log2 domain
// (m, l per row; l summed over the lane's own columns only), O = O * alpha + P V.
// kExt: softcap, ALiBi and the window mask of `mods` (decode_mask.cuh) instead of the causal
// mask (limit and min_limit unused); without it `mods` is never touched. L: the stage layout
// (KvTile, or TmaTile for the TMA form).
template <typename T, typename KV, int D, bool kExt = false, class L = KvTile<KV, D>>
__device__ __forceinline__ void attend_tile(uint32_t kbase, const uint32_t (&qf)[D / 16][4],
                                            float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                            int key0, const int (&limit)[2], int min_limit,
                                            float scale_log2, int lane, const DecodeParams& p,
                                            const DecodeMods& mods) {
  const int t4 = lane & 3;
  const int mrow = lane & 7;
  const int mat = lane >> 3;
  const uint32_t vbase = kbase + L::kTileBytes;
  // S = Q K^T over D in two independent mma chains (even and odd k-steps).
  float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  if constexpr (kIsFp8<KV>) {
    if (fp8_q_in_f16<T, KV, D>(p)) {  // Q rewritten in f16 (fp8_q_to_f16): K in f16 as well
      fp8_qk<__half, D, true, L>(kbase, qf, s, s2, lane);
    } else if (p.fp8_hw_cvt) {
      fp8_qk<T, D, true, L>(kbase, qf, s, s2, lane);
    } else {
      fp8_qk<T, D, false, L>(kbase, qf, s, s2, lane);
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t kb[4];
      ldmatrix_x4(kb, L::addr(kbase, (mat >> 1) * 8 + mrow, 2 * ks + (mat & 1)));
      if (ks & 1) {
        mma_16816<T>(s2[0], qf[ks], kb[0], kb[1]);
        mma_16816<T>(s2[1], qf[ks], kb[2], kb[3]);
      } else {
        mma_16816<T>(s[0], qf[ks], kb[0], kb[1]);
        mma_16816<T>(s[1], qf[ks], kb[2], kb[3]);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = (s[nt][e] + s2[nt][e]) * scale_log2;
  }
  if constexpr (kExt) {
    mods.apply(p, s, key0, t4);
  } else if (key0 + kDecodeTileKeys > min_limit) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
        if (key >= limit[e >> 1]) s[nt][e] = kNegInf;
      }
    }
  }
  // Online softmax (log2 domain) for rows g (hr 0) and g+8 (hr 1). The rescale of O and l by
  // alpha = 2^(m_old - m_new) runs only when some row of the warp has a new maximum: otherwise
  // alpha is exactly 1 and skipping it changes no bit. After the first tiles a running
  // maximum rarely grows, and the rescale (D/4 multiplies per lane) was a third of a 16-bit
  // tile's instructions.
  float mx[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mx[hr] = fmaxf(fmaxf(s[0][2 * hr], s[0][2 * hr + 1]), fmaxf(s[1][2 * hr], s[1][2 * hr + 1]));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
  }
  if (__any_sync(0xffffffffu, mx[0] > m[0] || mx[1] > m[1])) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float m_new = fmaxf(m[hr], mx[hr]);
      const float alpha = fast_exp2(m[hr] - (m_new == kNegInf ? 0.0f : m_new));
      m[hr] = m_new;
      l[hr] *= alpha;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[nt][2 * hr] *= alpha;
        o[nt][2 * hr + 1] *= alpha;
      }
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float base = m[hr] == kNegInf ? 0.0f : m[hr];
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][2 * hr] = fast_exp2(s[nt][2 * hr] - base);
      s[nt][2 * hr + 1] = fast_exp2(s[nt][2 * hr + 1] - base);
      sum += s[nt][2 * hr] + s[nt][2 * hr + 1];
    }
    l[hr] += sum;
  }
  // fp8 with the hardware conversion: P V in f16 (decode_fp8.cuh).
  const bool pv_f16 = kIsFp8<KV> && p.fp8_hw_cvt;
  auto pack = [pv_f16](float lo, float hi) {
    return pv_f16 ? pack2<__half>(lo, hi) : pack2<T>(lo, hi);
  };
  const uint32_t pa[4] = {pack(s[0][0], s[0][1]), pack(s[0][2], s[0][3]), pack(s[1][0], s[1][1]),
                          pack(s[1][2], s[1][3])};
  if constexpr (kIsFp8<KV>) {
    if (pv_f16) {
      fp8_pv<T, D, true, L>(vbase, pa, o, lane);
    } else {
      fp8_pv<T, D, false, L>(vbase, pa, o, lane);
    }
  } else {
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, L::addr(vbase, (mat & 1) * 8 + mrow, 2 * dt + (mat >> 1)));
      mma_16816<T>(o[2 * dt], pa, vb[0], vb[1]);
      mma_16816<T>(o[2 * dt + 1], pa, vb[2], vb[3]);
    }
  }
}

// The unit's softmax scale (log2 domain) with an fp8 cache's k_scale folded in, and its
// v_scale (1 for 16-bit caches or when no scale is given).
template <typename KV>
__device__ __forceinline__ float unit_scale_log2(const DecodeParams& p, int kvh) {
  if constexpr (kIsFp8<KV>) {
    if (p.k_scale != nullptr) return p.scale_log2 * __ldg(p.k_scale + kvh);
  }
  return p.scale_log2;
}
template <typename KV>
__device__ __forceinline__ float unit_v_scale(const DecodeParams& p, int kvh) {
  if constexpr (kIsFp8<KV>) {
    if (p.v_scale != nullptr) return __ldg(p.v_scale + kvh);
  }
  return 1.0f;
}

}  // namespace
}  // namespace kvattn::cuda
