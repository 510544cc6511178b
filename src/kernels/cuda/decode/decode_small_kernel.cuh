// The small-batch kernel (decode_params.h, "small mode"): one unit per CTA, its warps split a
// chunk of one sequence's keys; the last chunk's CTA merges the other pieces, which travel as
// tagged LL words (no fence, no flag, no merge kernel).
#pragma once

#include "kernels/cuda/decode/decode_tma.cuh"
#include "kernels/cuda/decode/decode_warp_tile.cuh"

namespace kvattn::cuda {
namespace {

// ---- the small-batch kernel: one unit per CTA, warps split the keys, fused merge ----------
// (decode_params.h, "small mode"). Grid (C, units, num_seqs); CTA (c, u, b).

// LL words (the "low latency" protocol of NCCL): a piece of the small kernel travels as 64-bit
// words of two 16-bit output values (low half) and the launch's tag (high half), each written
// and read by one 64-bit access, which is single-copy atomic: a reader that sees the tag sees
// the values, with no fence and no flag. Relaxed gpu-scope accesses (never served from L1).
__device__ __forceinline__ uint64_t ll_word(uint32_t payload, uint32_t tag) {
  return (static_cast<uint64_t>(tag) << 32) | payload;
}
__device__ __forceinline__ uint32_t ll_tag(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
__device__ __forceinline__ void st_ll(uint64_t* p, uint64_t w) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ void st_ll2(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ uint64_t ld_ll(const uint64_t* p) {
  uint64_t w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}
__device__ __forceinline__ void ld_ll2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// One phase stamp of this CTA (clock cycles since its entry c0), written by thread 0.
__device__ __forceinline__ void probe_stamp(const DecodeParams& p, int slot, long long c0) {
  if (p.probe != nullptr && threadIdx.x == 0) {
    probe_row(p)[slot] = static_cast<unsigned long long>(clock64() - c0);
  }
}

// Writes 4 consecutive output elements (row `token`, head, dims d..d+3).
template <typename T>
__device__ __forceinline__ void store_out4(const DecodeParams& p, int64_t token, int head, int D,
                                           int d, const float (&v)[4]) {
  uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                  static_cast<int64_t>(head) * D + d;
  const uint16_t b0 = to_bits<T>(v[0]), b1 = to_bits<T>(v[1]), b2 = to_bits<T>(v[2]),
                 b3 = to_bits<T>(v[3]);
  if (p.out_aligned4) {
    reinterpret_cast<uint32_t*>(dst)[0] = b0 | (static_cast<uint32_t>(b1) << 16);
    reinterpret_cast<uint32_t*>(dst)[1] = b2 | (static_cast<uint32_t>(b3) << 16);
  } else {
    dst[0] = b0;
    dst[1] = b1;
    dst[2] = b2;
    dst[3] = b3;
  }
}

// One 16-bit value of a pack2 register, as float.
template <typename T>
__device__ __forceinline__ float from_bits(uint32_t bits16) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(bits16 << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  }
}

// The merger's part of unit (kvh, rc) of sequence b: output quad q (row r = q / (D/4), dims
// d = 4 (q % (D/4)) ..), from its own piece (float32 in shared memory: mine_o[r*D + d],
// mine_lse[r]) and the other C - 1 pieces' LL words, polled until they carry this launch's tag
// (16 pieces in flight at once), combined with a running max. Writes out (and lse when asked).
// Returns false, writing nothing, when a piece never arrived.
template <typename T, int D>
__device__ __forceinline__ bool merge_quad_ll(const DecodeParams& p, int q, int C, int64_t rstep,
                                              int64_t wi0, int rc, int kvh, int b,
                                              const float* mine_o, const float* mine_lse,
                                              uint32_t tag) {
  constexpr int kQuads = D / 4;
  constexpr int kBatch = 16;
  const int r = q / kQuads;
  const int d = (q - r * kQuads) * 4;
  float mx = mine_lse[r];
  float sum = mx == kNegInf ? 0.0f : 1.0f;
  float4 acc = mx == kNegInf ? make_float4(0.f, 0.f, 0.f, 0.f)
                             : *reinterpret_cast<const float4*>(mine_o + r * D + d);
  const int others = C - 1;
  for (int j0 = 0; j0 < others; j0 += kBatch) {
    // Absent pieces (past C - 1) read as tagged zeros with LSE -inf: weight 0 times 0.
    uint64_t w0[kBatch] = {}, w1[kBatch] = {}, wl[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) wl[u] = __float_as_uint(kNegInf);
    auto stale = [&](int u) {
      return j0 + u < others &&
             (ll_tag(w0[u]) != tag || ll_tag(w1[u]) != tag || ll_tag(wl[u]) != tag);
    };
    auto load = [&](int u) {
      const int64_t wi = wi0 + static_cast<int64_t>(j0 + u) * rstep + r;
      ld_ll2(p.ws_ll + wi * (D / 2) + d / 2, w0[u], w1[u]);
      wl[u] = ld_ll(p.ws_ll_lse + wi);
    };
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (j0 + u < others) load(u);
    }
    // Every piece not landed yet is asked again at once: one round trip per poll, however
    // many are late.
    for (int polls = 0;; ++polls) {
      bool late = false;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) late = late || stale(u);
      if (!late) break;
      if (polls == kMaxPolls) return false;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (stale(u)) load(u);
      }
    }
    float lj[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) lj[u] = __uint_as_float(static_cast<uint32_t>(wl[u]));
    float mb = mx;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) mb = fmaxf(mb, lj[u]);
    if (mb == kNegInf) continue;  // no piece so far saw a key
    const float rescale = mx == kNegInf ? 0.0f : fast_exp2(mx - mb);
    sum *= rescale;
    acc.x *= rescale;
    acc.y *= rescale;
    acc.z *= rescale;
    acc.w *= rescale;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float f = lj[u] == kNegInf ? 0.0f : fast_exp2(lj[u] - mb);
      const auto lo = static_cast<uint32_t>(w0[u]), hi = static_cast<uint32_t>(w1[u]);
      sum += f;
      acc.x += f * from_bits<T>(lo & 0xffffu);
      acc.y += f * from_bits<T>(lo >> 16);
      acc.z += f * from_bits<T>(hi & 0xffffu);
      acc.w += f * from_bits<T>(hi >> 16);
    }
    mx = mb;
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const int rg = rc * kDecodeRows + r;
  const int i = rg / p.group;
  const int head = kvh * p.group + (rg - i * p.group);
  const int64_t token = static_cast<int64_t>(b) * p.q_len + i;
  const float v4[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
  store_out4<T>(p, token, head, D, d, v4);
  if (d == 0 && p.lse != nullptr) {
    p.lse[head * p.lse_head_stride + token] =
        sum > 0.0f ? (mx + __log2f(sum)) * 0.69314718055994531f : kNegInf;
  }
  return true;
}

// kExt: window, softcap, ALiBi (decode_mask.cuh); the chunks split the window's tiles only.
// kIssue: how the warps copy their tiles (CopyIssue, as decode_kernel's).
template <typename T, typename KV, int D, bool kAligned16, bool kExt = false,
          CopyIssue kIssue = CopyIssue::kByCopy>
__global__ void __launch_bounds__(kDecodeMaxWarps * 32)
    decode_small_kernel(const __grid_constant__ DecodeParams p) {
  constexpr bool kTma = kIssue == CopyIssue::kTma;
  static_assert(!kTma || (kAligned16 && (!kIsFp8<KV> || D == 128)),
                "TMA: aligned 16-bit caches, or fp8 ones at head_dim 128");
  using L = StageTile<KV, D, kIssue>;
  extern __shared__ __align__(128) uint8_t smem[];
  const long long c0 = clock64();
  const unsigned long long t_entry = p.probe != nullptr ? global_ns() : 0;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int nw = static_cast<int>(blockDim.x >> 5);
  const int C = p.parts;
  const int c = blockIdx.x;
  const int unit = blockIdx.y;
  const int b = blockIdx.z;
  const int kvh = unit / p.row_chunks;
  const int rc = unit - kvh * p.row_chunks;
  const int gid = lane >> 2;
  const int t4 = lane & 3;

  // Diagnostics: the CTA's entry and exit times, its role (0 publisher, 1 merger, 2 unused
  // chunk) and SM; the phase stamps go in slots 3-8 (probe_stamp).
  auto probe_exit = [&](unsigned long long role) {
    if (p.probe != nullptr && tid == 0) {
      unsigned long long* st = probe_row(p);
      st[0] = t_entry;
      st[1] = global_ns();
      st[2] = static_cast<unsigned long long>(clock64() - c0);
      st[9] = role;
      st[10] = sm_id();
    }
  };

  // The length first: everything else waits on it (the loads below fly with it). Before the
  // grid-dependency wait below (a PDL launch, DecodeArgs::pdl) only the lengths, block ids and
  // cache_leftpad are read, which the caller promises the previous kernel does not write.
  const int len_raw = __ldg(p.cache_seqlens + b);
  uint32_t* const gen_word = p.ws_gen + static_cast<int64_t>(b) * gridDim.y + unit;

  // This warp's tiles [ta, tb) of chunk c when the sequence has n tiles, and the chunks in use
  // (all C unless p.small_min_tiles: then fewer for short sequences; decode_params.h).
  int ta = 0, tb = 0;
  int chunks = C;
  // Balanced parts (the first n % parts one longer) in 32-bit arithmetic: 64-bit divisions are
  // ~100-instruction subroutines on the prologue's critical path.
  auto part_begin = [](int n, int parts, int i) {
    const int q = n / parts;
    return q * i + min(i, n - q * parts);
  };
  // Interleaved chunks (p.small_interleave): chunk c's tiles are c, c + C, c + 2C, ... and
  // warp w's every nw-th of them from c + C w, so a warp's first tiles do not depend on the
  // length: their block ids load with it, and a wrong guess (the engine's graphs guess the
  // table's width) costs no reload. Else a chunk holds a contiguous range of tiles and each
  // warp a contiguous part of it. A warp visits ta, ta + tstep, ... below tb.
  const int tstep = p.small_interleave ? C * nw : 1;
  auto split = [&](int n) {
    if (p.small_interleave) {
      ta = c + C * warp;
      tb = n;
      return;
    }
    if (p.small_min_tiles > 0) {
      const int per_chunk = nw * p.small_min_tiles;
      chunks = max(1, min(C, (n + per_chunk - 1) / per_chunk));
    }
    if (c >= chunks) {  // an unused chunk: no tiles (the CTA exits once the length is known)
      ta = tb = 0;
      return;
    }
    const int ct0 = part_begin(n, chunks, c);
    const int len_c = part_begin(n, chunks, c + 1) - ct0;
    ta = ct0 + part_begin(len_c, nw, warp);
    tb = ct0 + part_begin(len_c, nw, warp + 1);
  };
  // kExt: the tiles [first, n) (from the window's first tile) split the same way.
  auto split_from = [&](int first, int n) {
    split(n - first);
    ta += first;
    tb += first;
  };
  // Lanes 0-15: (block id, offset) of key (lane & 15) of tile ti; lanes 16-31: of tile
  // ti + tstep.
  // Ids are read for any key inside the table row (the row holds p.capacity keys); whether
  // the key is below the length is decided when its tile is issued (offset -1 past the end).
  int nid = 0, noff = -1;
  auto load_ids = [&](int t, bool mine) {
    if (!mine) return;
    nid = 0;
    noff = -1;
    if (t >= tb) return;
    const int key = t * kDecodeTileKeys + (lane & 15);
    if (key < p.capacity) {
      const int page = key_page(p, key, noff);
      nid = __ldg(p.block_table + static_cast<int64_t>(b) * p.bt_stride + page);
    }
  };
  // The first two tiles' ids from the guessed length, in flight together with the length.
  const int guess_tiles = tiles_of(p.len_hint);
  const int guess_first = first_tile<kExt>(p, b, p.len_hint);
  if constexpr (kExt) {
    split_from(guess_first, guess_tiles);
  } else {
    split(guess_tiles);
  }
  load_ids(ta, lane < 16);
  load_ids(ta + tstep, lane >= 16);

  // The length arrived: a wrong guess gets its range and ids again, still before the wait
  // (the caller's promise covers them), so that under PDL the reload overlaps the previous
  // kernel. (Asking L2 for the first tiles' K/V rows here as well gained nothing on the
  // H200: docs/perf/NOTES.md session 20.)
  const int len = clamp_len(p, len_raw, false);  // reported after the wait
  const int ntiles = tiles_of(len);
  if constexpr (kExt) {
    const int first = first_tile<kExt>(p, b, len);
    if (ntiles != guess_tiles || first != guess_first) {  // wrong guess: range and ids again
      // (interleaved: the first tiles moved only with the window's start, or past the guess)
      const bool reload = !p.small_interleave || first != guess_first || ntiles > guess_tiles;
      split_from(first, ntiles);
      if (reload) {
        load_ids(ta, lane < 16);
        load_ids(ta + tstep, lane >= 16);
      }
    }
    // Keys before the window (in its first tile only) are zero-filled, never read; the
    // later tiles issued below start past it.
    const int key = (lane < 16 ? ta : ta + tstep) * kDecodeTileKeys + (lane & 15);
    if (key >= len || key < first_key(p, b, len)) noff = -1;
  } else {
    if (ntiles != guess_tiles) {  // wrong guess: this warp's range and its ids again
      // (interleaved: the first tiles do not move; their ids were loaded unless past the guess)
      const bool reload = !p.small_interleave || ntiles > guess_tiles;
      split(ntiles);
      if (reload) {
        load_ids(ta, lane < 16);
        load_ids(ta + tstep, lane >= 16);
      }
    }
    if ((lane < 16 ? ta : ta + tstep) * kDecodeTileKeys + (lane & 15) >= len) noff = -1;
  }

  // PDL: the previous kernel (which may write q, the caches and, if it was a decode, this
  // workspace) has completed from here on. Then the unit's gen word, which gives this launch's
  // LL tag (needed only at the end). With p.pdl_trigger (off: tuning.h) a PDL-launched
  // successor may be scheduled from here on; it still waits for this grid's completion.
  ptx::grid_dependency_wait();
  if (p.pdl_trigger != 0) ptx::grid_launch_dependents();
  const uint32_t gen = __ldcg(gen_word);
  if (c == 0 && unit == 0 && tid == 0) {  // a bad length (and pad) in the fault word
    (void)clamp_len(p, len_raw, true);
    if constexpr (kExt) (void)seq_pad(p, b, len, true);
  }

  // The unit's query tile (16 rows; rows past `rows` are zero) into shared memory, each 16-byte
  // chunk once for the CTA (its warps share it); the fragments are read after the first tiles
  // are issued.
  constexpr int kQRow = D + 8;  // padded row (elements): ldmatrix rows hit distinct banks
  constexpr int kQChunks = D / 8;
  __shared__ __align__(128) uint16_t s_q[kDecodeRows * kQRow];
  for (int idx = tid; idx < kDecodeRows * kQChunks; idx += blockDim.x) {
    const int r = idx / kQChunks;
    const int ch = idx - r * kQChunks;
    const int rg = rc * kDecodeRows + r;
    const bool valid = rg < p.rows;
    const T* src = static_cast<const T*>(p.q);
    if (valid) {
      const int i = rg / p.group;
      const int64_t token = static_cast<int64_t>(b) * p.q_len + i;
      const int head = kvh * p.group + (rg - i * p.group);
      src += token * p.q_stride + static_cast<int64_t>(head) * D + ch * 8;
    }
    const uint32_t dst = smem_u32(s_q + r * kQRow + ch * 8);
    if (p.q_aligned16) {
      cp_async_16(dst, src, valid);
    } else {
      st_shared_16(dst, valid ? load_8_unaligned(src) : make_uint4(0, 0, 0, 0));
    }
  }
  cp_async_commit();  // the oldest group: the query tile
  int row_i[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = rc * kDecodeRows + gid + 8 * hr;
    row_i[hr] = r < p.rows ? r / p.group : 0;
  }

  probe_stamp(p, 3, c0);
  if (c >= chunks) {  // unused for this length: nothing to publish, the merger does not wait
    cp_async_wait<0>();  // the query tile's copies land before the CTA's shared memory goes
    probe_exit(2);
    return;
  }
  int limit[2] = {0, 0};
  int min_limit = 0, warp_limit = 0;
  DecodeMods mods;
  if constexpr (kExt) {
    mods.init(p, b, len, kvh, rc, gid);
  } else {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      limit[hr] = p.causal ? min(len, row_i[hr] + len - p.q_len + 1) : len;
    }
    min_limit = min(limit[0], limit[1]);
    warp_limit = __reduce_max_sync(0xffffffffu, max(limit[0], limit[1]));
  }

  float o[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};

  // ---- this warp's tiles [ta, tb): the same pipeline as the stream kernel ----
  const int stages = p.stages;
  [[maybe_unused]] TmaRing<L> ring;  // kTma: the stages and their mbarriers (decode_tma.cuh)
  uint32_t wbase = 0;
  if constexpr (kTma) {
    ring.init(smem_u32(smem), warp, nw, stages, lane);
    wbase = ring.tiles;
  } else {
    wbase = smem_u32(smem) + static_cast<uint32_t>(warp * stages * L::kStageBytes);
  }
  const uint64_t kv_policy = l2_policy(p.kv_evict_first != 0);
  int ti = ta;
  auto issue_next = [&](int stage) {
    if constexpr (kTma) {
      ring.template issue<true>(p, stage, nid, noff, lane, kvh, kv_policy);
      if (p.tma_prefetch != 0) ring.prefetch_next(p, nid, noff, lane, kvh);
    } else {
      issue_tile<KV, D, kAligned16, true, kIssue>(p, wbase + stage * L::kStageBytes, nid, noff,
                                                  lane, kvh, kv_policy);
    }
    const int id_hi = __shfl_down_sync(0xffffffffu, nid, 16);
    const int off_hi = __shfl_down_sync(0xffffffffu, noff, 16);
    if (lane < 16) {
      nid = id_hi;
      noff = off_hi;
    }
    ti += tstep;
    load_ids(ti + tstep, lane >= 16);
    if ((ti + tstep) * kDecodeTileKeys + (lane & 15) >= len && lane >= 16) noff = -1;
  };
  for (int st = 0; st < stages - 1; ++st) {
    if (ti < tb) issue_next(st);
    if constexpr (!kTma) cp_async_commit();
  }
  // The query tile landed (the oldest group) for every thread: its fragments into registers.
  if constexpr (kTma) {
    cp_async_wait<0>();  // the query tile is the only cp.async group
  } else {
    cp_async_wait_dyn(stages - 1);
  }
  __syncthreads();
  uint32_t qf[D / 16][4];
  if constexpr (kIsFp8<KV>) {  // the fp8 tile's dim order (decode_fp8.cuh)
    const bool adjacent = fp8_q_adjacent<T, KV, D>(p);
    const int step = fp8_q_pair_step(adjacent);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const uint16_t* row =
              s_q + (gid + 8 * hr) * kQRow + decode_fp8_q_dim(ks, half, t4, adjacent);
          qf[ks][hr + 2 * half] =
              static_cast<uint32_t>(row[0]) | (static_cast<uint32_t>(row[step]) << 16);
        }
      }
    }
  } else {
    const int mtx = lane >> 3;
    const uint32_t qbase = smem_u32(s_q + ((mtx & 1) * 8 + (lane & 7)) * kQRow + (mtx >> 1) * 8);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qf[ks], qbase + ks * 32);
  }
  float scale_log2 = unit_scale_log2<KV>(p, kvh);
  if constexpr (kIsFp8<KV>) {
    if (fp8_q_in_f16<T, KV, D>(p)) scale_log2 *= fp8_q_to_f16(qf);  // S = Q K^T in f16
  }
  int cstage = 0, istage = stages - 1;
  [[maybe_unused]] const int first_visited = kTma && kExt ? first_key(p, b, len) : 0;
  for (int t = ta; t < tb; t += tstep) {
    if constexpr (kTma) {
      ring.wait(cstage, stages);
      // The sequence's last tile (and an extended kernel's first): V rows past the length
      // (before the first key) hold the page's other rows.
      ring.clear_unvisited(cstage, t * kDecodeTileKeys, first_visited, len, lane);
    } else {
      cp_async_wait_dyn(stages - 2);
    }
    __syncwarp();  // this tile landed for every lane; the stage refilled below is free
    if (t == ta) probe_stamp(p, 4, c0);
    if (ti < tb) issue_next(istage);
    if constexpr (!kTma) cp_async_commit();
    if (++istage == stages) istage = 0;
    const int key0 = t * kDecodeTileKeys;
    if (kExt ? mods.tile_has_work(key0) : key0 < warp_limit) {
      attend_tile<T, KV, D, kExt, L>(wbase + cstage * L::kStageBytes, qf, o, m, l, key0, limit,
                                     min_limit, scale_log2, lane, p, mods);
    }
    if (++cstage == stages) cstage = 0;
  }
  cp_async_wait<0>();
  if constexpr (kIsFp8<KV>) fp8_restore_o<D>(o, unit_v_scale<KV>(p, kvh), lane);
  probe_stamp(p, 5, c0);
  float lq[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    lq[hr] = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
    lq[hr] += __shfl_xor_sync(0xffffffffu, lq[hr], 2);
  }
  if constexpr (kTma) ring.release(stages, lane);  // the region is reused below
  __syncthreads();  // every warp's copies landed: the tile buffers are free
  probe_stamp(p, 6, c0);

  // ---- combine the warps' states through shared memory into this chunk's piece ----
  constexpr int kRowF = D + 4;                     // floats per o row (padded)
  constexpr int kWarpF = kDecodeRows * kRowF + 2 * kDecodeRows;  // o rows, m[16], l[16]
  float* const red = reinterpret_cast<float*>(smem);
  const int rows_here = min(kDecodeRows, p.rows - rc * kDecodeRows);
  {
    float* wo = red + warp * kWarpF;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = gid + 8 * hr;
      if (r >= rows_here) continue;  // padding rows of the mma tile: never read
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        *reinterpret_cast<float2*>(wo + r * kRowF + nt * 8 + 2 * t4) =
            make_float2(o[nt][2 * hr], o[nt][2 * hr + 1]);
      }
      if (t4 == 0) {
        wo[kDecodeRows * kRowF + r] = m[hr];
        wo[kDecodeRows * kRowF + kDecodeRows + r] = lq[hr];
      }
    }
  }
  __syncthreads();
  const int64_t rstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;  // slot stride (rows)
  const int64_t wi_unit = static_cast<int64_t>(kvh) * p.rows + rc * kDecodeRows;
  // Row r of piece j (chunk j's) at wi0 + j * rstep + r.
  const int64_t wi0 = static_cast<int64_t>(b) * C * rstep + wi_unit;
  // The last chunk's CTA merges; it keeps its own piece in shared memory (float32, after the
  // warps' states). The others publish theirs as LL words carrying this launch's tag.
  const bool merger = c == chunks - 1;
  const uint32_t tag = ll_tag_after(gen, p.epoch);
  float* const mine_o = red + nw * kWarpF;
  float* const mine_lse = mine_o + kDecodeRows * D;
  constexpr int kQuads = D / 4;
  const int quads = rows_here * kQuads;
  for (int it = tid; it < quads; it += blockDim.x) {
    const int r = it / kQuads;
    const int d = (it - r * kQuads) * 4;
    // Unrolled over the most warps a CTA has (nw is 4 or 8): the shared-memory loads of all
    // warps are in flight together instead of one loop trip each.
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < kDecodeMaxWarps; ++w) {
      if (w < nw) mx = fmaxf(mx, red[w * kWarpF + kDecodeRows * kRowF + r]);
    }
    float lsum = 0.0f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mx != kNegInf) {
#pragma unroll
      for (int w = 0; w < kDecodeMaxWarps; ++w) {
        if (w >= nw) break;
        const float* wo = red + w * kWarpF;
        const float wm = wo[kDecodeRows * kRowF + r];
        const float f = wm == kNegInf ? 0.0f : fast_exp2(wm - mx);
        lsum += f * wo[kDecodeRows * kRowF + kDecodeRows + r];
        const float4 v = *reinterpret_cast<const float4*>(wo + r * kRowF + d);
        acc.x += f * v.x;
        acc.y += f * v.y;
        acc.z += f * v.z;
        acc.w += f * v.w;
      }
    }
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    const float4 v = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    const float lse2 = lsum > 0.0f ? mx + __log2f(lsum) : kNegInf;
    if (merger) {
      *reinterpret_cast<float4*>(mine_o + r * D + d) = v;
      if (d == 0) mine_lse[r] = lse2;
    } else {
      const int64_t wi = wi0 + c * rstep + r;
      st_ll2(p.ws_ll + wi * (D / 2) + d / 2, ll_word(pack2<T>(v.x, v.y), tag),
             ll_word(pack2<T>(v.z, v.w), tag));
      if (d == 0) st_ll(p.ws_ll_lse + wi, ll_word(__float_as_uint(lse2), tag));
    }
  }
  probe_stamp(p, 7, c0);

  // ---- the merger polls the other pieces (no fence, no flag: the tags say they landed),
  // merges, and leaves its tag in the unit's gen word for the next launch. It waits only for
  // CTAs of lower index in the grid, which the GPU dispatches before it (stream-K's fix-up
  // makes the same assumption); small mode's grid fits on the GPU at once besides. ----
  if (merger) {
    __syncthreads();  // the own piece is in shared memory
    bool arrived = true;
    for (int q = tid; q < quads; q += blockDim.x) {
      arrived =
          merge_quad_ll<T, D>(p, q, chunks, rstep, wi0, rc, kvh, b, mine_o, mine_lse, tag) &&
          arrived;
    }
    if (!arrived) record_fault(p.fault_word, kFaultDecodeMergeStalled);
    // Every CTA of the launch read the gen word before it stored its piece, so before this.
    if (tid == 0) *gen_word = tag;
    probe_stamp(p, 8, c0);
  }
  probe_exit(merger ? 1 : 0);
}

}  // namespace
}  // namespace kvattn::cuda
