// The split kernel (decode_params.h): CTAs of several KV heads, one cp.async pipeline per warp,
// stream-K ranges over the batch's concatenated tiles (or whole sequences per CTA); pieces cut
// by a range boundary go to the workspace for merge_kernel (decode_merge_kernel.cuh).
#pragma once

#include <climits>

#include "kernels/cuda/decode/decode_cta_sweep.cuh"
#include "kernels/cuda/decode/decode_stream_ranges.cuh"
#include "kernels/cuda/decode/decode_swap_tile.cuh"
#include "kernels/cuda/decode/decode_tma.cuh"
#include "kernels/cuda/decode/decode_warp_tile.cuh"

namespace kvattn::cuda {
namespace {

// ---- the split kernel: multi-head CTAs, one pipeline per warp, stream-K ranges -------------

// First index in [0, n] with a[i] >= x (a non-decreasing).
__device__ __forceinline__ int lower_bound_smem(const int* a, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The unit of warp w of a split-kernel CTA in `slice`: KV head kvh, row chunk rc; ok is false
// for a warp past the slice's heads or row chunks (it has no unit and returns early).
struct WarpUnit {
  int kvh = 0;
  int rc = 0;
  bool ok = false;
};
__device__ __forceinline__ WarpUnit warp_unit(const DecodeParams& p, int slice, int w) {
  WarpUnit u;
  u.kvh = (slice % p.head_blocks) * p.heads_per_cta + w / p.rc_per_cta;
  u.rc = (slice / p.head_blocks) * p.rc_per_cta + w % p.rc_per_cta;
  u.ok = u.kvh < p.num_kv_heads && u.rc < p.row_chunks;
  return u;
}

// A position in a CTA's stream of tiles: tile t of sequence b, inside the segment
// [t0, t_end) of b's tiles that this CTA computes (absolute tile indices: kExt's sequences
// start at their window's first tile, first_tile<kExt>); stream mode: in the range of entry k
// of the CTA's list (Source::range).
struct Cursor {
  int b;
  int t;
  int t0;
  int t_end;
  int len;
  int k;
  bool done;
};

// Where a CTA's tiles come from: ranges of the concatenated tiles (stream mode, prefix = tile
// prefix sum in shared memory; entry 0 the static range [g0, g1), entries k >= 1 the dynamic
// ranges the CTA claims, decode_stream_ranges.cuh) or sequences part, part + parts, ... (whole
// mode).
struct Source {
  const int* prefix;
  int g0, g1;
  int part, parts;
  bool stream;
  StreamRanges ranges;
  ClaimRing* ring;       // the CTA's claims (dynamic split)
  uint64_t* claim_word;  // the slice's counter and gen word (dynamic split)

  // The range of entry k (-1: none left), for a cursor that reached entry k (its slot is not
  // reused while this warp computes in it or before it).
  __device__ __forceinline__ int range(int k) const {
    if constexpr (!kDecodeDynamicSplitBuilt) return part;  // entry 0 is the only one
    return k == 0 ? part : smem_load(ring->val + k % kClaimRing);
  }
};

// Moves c to the first non-empty segment of sequence `b` or a later one (stream mode: in the
// range of entry c.k, starting at tile g0 of the batch, then in the CTA's next ranges).
template <bool kExt>
__device__ __forceinline__ void seek(const DecodeParams& p, const Source& s, int b, Cursor& c,
                                     int g0 = 0) {
  if (s.stream) {
    int g1 = c.k == 0 ? s.g1 : s.ranges.bound(s.range(c.k) + 1);
    for (;;) {
      while (b < p.num_seqs && s.prefix[b + 1] == s.prefix[b]) ++b;
      if (b < p.num_seqs && s.prefix[b] < g1) break;
      // The range is done: the CTA's next one (dynamic split, plain kernels only: its code
      // raised the extended fp8 d128 kernel past the 128 registers of two CTAs an SM), claimed
      // by the first warp here.
      int r = -1;
      if constexpr (!kExt && kDecodeDynamicSplitBuilt) {
        if (s.ranges.ndyn > 0) {
          r = dynamic_entry(s.ring, c.k + 1, s.claim_word, s.ranges, p.fault_word,
                            threadIdx.x & 31);
        }
      }
      if (r < 0) {
        c.done = true;
        return;
      }
      ++c.k;
      g0 = s.ranges.bound(r);
      g1 = s.ranges.bound(r + 1);
      b = lower_bound_smem(s.prefix, p.num_seqs, g0 + 1) - 1;
    }
    const int base = s.prefix[b];
    c.b = b;
    if constexpr (kExt) {  // prefix counts the visited tiles, from the window's first one
      c.len = seq_len(p, b, false);
      const int first = first_tile<kExt>(p, b, c.len);
      c.t0 = c.t = first + max(g0 - base, 0);
      c.t_end = first + min(s.prefix[b + 1], g1) - base;
    } else {
      c.t0 = c.t = max(g0 - base, 0);
      c.t_end = min(s.prefix[b + 1], g1) - base;
      c.len = seq_len(p, b, false);
    }
    c.done = false;
  } else {
    int len = 0;
    while (b < p.num_seqs && (len = seq_len(p, b, false)) == 0) b += s.parts;
    // (A sequence of len > 0 has a visited tile even when its pad is len: first_tile.)
    if (b >= p.num_seqs) {
      c.done = true;
      return;
    }
    c.b = b;
    c.t0 = c.t = first_tile<kExt>(p, b, len);
    c.t_end = tiles_of(len);
    c.len = len;
    c.done = false;
  }
}

template <bool kExt>
__device__ __forceinline__ void advance(const DecodeParams& p, const Source& s, Cursor& c) {
  if (c.done) return;
  if (++c.t < c.t_end) return;
  seek<kExt>(p, s, s.stream ? c.b + 1 : c.b + s.parts, c);
}

// kExt: window, softcap, ALiBi (decode_mask.cuh); without it, the plain causal kernel.
// kSwap: the swapped tile (decode_swap_tile.cuh; 16-bit caches, and fp8 ones at head_dim 64 and
// 128): units of kSwapRows rows (the host sets p.row_chunks and the CTA shape for them), else
// of kDecodeRows. The fp8 swapped tile must stay within 128 registers (sm_90a: 120 plain, 128
// extended at head_dim 128; ~100 at 64) for two CTAs of 8 warps to share an SM
// (decode_config). (A minimum-blocks bound here would do it, but any second
// __launch_bounds__ argument, 1 included, changes ptxas's register choice for every
// instantiation: 16-bit d256 170 -> 207, the 16-row fp8 d128 216 -> 230.)
// kIssue: how the warps copy their tiles (CopyIssue; kTma: decode_tma.cuh's ring, whose
// shared memory the launcher sizes with kDecodeTmaSmemExtra; kCtaSweep: the CTA copies its
// heads' tiles together, decode_cta_sweep.cuh, whose contract the launcher checks).
template <typename T, typename KV, int D, bool kAligned16, bool kExt = false, bool kSwap = false,
          CopyIssue kIssue = CopyIssue::kByCopy>
__global__ void __launch_bounds__(kDecodeMaxWarps * 32)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(!kSwap || !kIsFp8<KV> || D == 64 || D == 128 || D == 256,
                "fp8 swapped tile: d64 / d128 / d256");
  constexpr bool kTma = kIssue == CopyIssue::kTma;
  static_assert(!kTma || (kAligned16 && (!kIsFp8<KV> || D == 128)),
                "TMA: aligned 16-bit caches, or fp8 ones at head_dim 128");
  constexpr bool kSweep = kIssue == CopyIssue::kCtaSweep;
  static_assert(!kSweep || kAligned16, "CTA sweep: aligned caches");
  // The dynamic split's code (decode_stream_ranges.cuh): plain kernels only, and only where it
  // is compiled in.
  constexpr bool kDynamicCode = kDecodeDynamicSplitBuilt && !kExt;
  using L = StageTile<KV, D, kIssue>;
  // Output fragments per lane: O (D/8 n-tiles of 16 rows) or O^T (D/16 m-tiles of 8 rows).
  constexpr int kOT = kSwap ? D / 16 : D / 8;
  constexpr int kUnitRows = kSwap ? kSwapRows : kDecodeRows;
  const int hd = mem_head_dim<D, static_cast<int>(sizeof(KV))>(p);  // < D: a padded tile
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int slice = blockIdx.x % p.slices;
  const int part = blockIdx.x / p.slices;
  const WarpUnit unit = warp_unit(p, slice, warp);
  const int kvh = unit.kvh;
  const int rc = unit.rc;
  const int B = p.num_seqs;
  if (p.probe != nullptr && tid == 0) {  // diagnostics: kDecodeProbeSlots' split layout
    unsigned long long* st = probe_row(p);
    st[0] = global_ns();
    st[10] = sm_id();
    st[11] = kDecodeProbeSplit;
  }

  Source src;
  src.prefix = reinterpret_cast<const int*>(smem);
  src.part = part;
  src.parts = p.parts;
  src.stream = p.stream != 0;
  src.g0 = src.g1 = 0;
  src.ring = nullptr;
  src.claim_word = nullptr;
  int total = 0;
  if (src.stream) {
    // Exclusive prefix sum of the sequences' tile counts: prefix[0..B], warp sums after it.
    int* prefix = reinterpret_cast<int*>(smem);
    int* wsum = prefix + B + 1;
    // The dynamic split's claims after them (decode_host::prefix_bytes_for): none yet; every
    // warp with a unit computes in entry 0.
    const bool dynamic = kDynamicCode && p.dynamic_split != 0;
    src.ring = reinterpret_cast<ClaimRing*>(wsum + kDecodeMaxWarps);
    if (dynamic) {
      if (tid < kClaimRing) {
        src.ring->key[tid] = -1;
        src.ring->val[tid] = -1;
      }
      if (tid < kDecodeMaxWarps) {  // entry tid: warp tid's (a warp without a unit: none)
        const bool w_unit = tid < static_cast<int>(blockDim.x >> 5) && warp_unit(p, slice, tid).ok;
        src.ring->warp_entry[tid] = w_unit ? 0 : INT_MAX;
      }
      if (tid == 0) src.ring->upto = 0;
      src.claim_word = p.ws_claim + 2 * slice;
    }
    const int per = (B + blockDim.x - 1) / blockDim.x;
    const int lo = min(B, tid * per);
    const int hi = min(B, lo + per);
    int sum = 0;
    for (int b = lo; b < hi; ++b) {
      const int len = seq_len(p, b, blockIdx.x == 0);
      if constexpr (kExt) (void)seq_pad(p, b, len, blockIdx.x == 0);  // report a bad pad
      const int t = visited_tiles<kExt>(p, b, len);
      prefix[b + 1] = t;
      sum += t;
    }
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    if (lane == 31) wsum[warp] = incl;
    if (tid == 0) prefix[0] = 0;
    __syncthreads();
    int run = incl - sum;
    for (int w = 0; w < warp; ++w) run += wsum[w];
    for (int b = lo; b < hi; ++b) {
      run += prefix[b + 1];
      prefix[b + 1] = run;
    }
    __syncthreads();
    total = prefix[B];
    src.ranges = StreamRanges::make(total, p.parts, p.part_cap, dynamic);
    const int nparts = src.ranges.nstatic;
    if (part >= nparts) return;  // CTA-uniform
    src.parts = nparts;
    src.g0 = src.ranges.bound(part);
    src.g1 = src.ranges.bound(part + 1);
    // PDL (DecodeArgs::pdl): the lengths above may be read while the previous kernel finishes;
    // the workspace, q and the caches only after it completed. p.pdl_trigger: as in
    // decode_small_kernel.cuh; p.merge_pdl: the successor is this launch's merge kernel,
    // which may then be scheduled while this grid runs (it waits for its completion).
    ptx::grid_dependency_wait();
    if (p.pdl_trigger != 0 || p.merge_pdl != 0) ptx::grid_launch_dependents();
    if constexpr (kDynamicCode) {
      if (src.ranges.ndyn > 0 && part == 0 && tid == 0) install_claim_counter(src.claim_word);
    }
    // CTA `part` owns sequences part, part + nparts, ...: it writes zeros for the empty ones
    // (below). Each sequence's first piece slot and piece count the merge kernel derives from
    // the lengths itself (decode_merge_kernel.cuh, stream_meta).
  } else {
    if (slice == 0 && tid == 0) {
      for (int b = part; b < B; b += p.parts) {  // report bad lengths (and pads)
        const int len = seq_len(p, b, true);
        if constexpr (kExt) (void)seq_pad(p, b, len, true);
      }
    }
    ptx::grid_dependency_wait();  // PDL: as in stream mode
    if (p.pdl_trigger != 0) ptx::grid_launch_dependents();
  }
  // No CTA-wide barrier below but the CTA sweep's, whose launcher gives every warp a unit.
  if (!unit.ok) return;

  const int gid = lane >> 2;  // mma row group
  const int t4 = lane & 3;    // mma thread in group
  const float scale_log2 = unit_scale_log2<KV>(p, kvh);

  // Writes a finished piece of sequence b: o, m (log2 domain, scaled), l (summed over the
  // lanes of a row) of this warp's rows, to out (+ lse) when the piece is all of b, else to
  // slot range + b. A lane's rows hr = 0, 1: gid and gid + 8 (O), or 2 t4 and 2 t4 + 1 (O^T).
  auto write_piece = [&](int b, bool direct, int range, const float (&o)[kOT][4],
                         const float (&m)[2], const float (&l)[2]) {
    const bool lse_lane = kSwap ? gid == 0 : t4 == 0;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = rc * kUnitRows + (kSwap ? 2 * t4 + hr : gid + 8 * hr);
      if (r >= p.rows) continue;
      const int i = r / p.group;
      const int head = kvh * p.group + (r - i * p.group);
      const int64_t token = static_cast<int64_t>(b) * p.q_len + i;
      const float inv = l[hr] > 0.0f ? 1.0f / l[hr] : 0.0f;
      const float lse2 = l[hr] > 0.0f ? m[hr] + __log2f(l[hr]) : kNegInf;
      if (direct) {
        uint16_t* const row_out =
            static_cast<uint16_t*>(p.out) + token * p.out_stride +
            static_cast<int64_t>(head) * hd;
        // A padded tile (hd < D) stores its first hd dims (a multiple of 16).
        if constexpr (kSwap && kIsFp8<KV>) {  // dims 32 c + 4 gid .. + 3 (fp8_swap_o_dim)
#pragma unroll
          for (int c = 0; c < kOT / 2; ++c) {
            if (32 * c + 4 * gid >= hd) break;  // a padded tile: all four dims past head_dim
            uint16_t* dst = row_out + 32 * c + 4 * gid;
            const uint16_t v0 = to_bits<T>(o[2 * c][hr] * inv);
            const uint16_t v1 = to_bits<T>(o[2 * c][hr + 2] * inv);
            const uint16_t v2 = to_bits<T>(o[2 * c + 1][hr] * inv);
            const uint16_t v3 = to_bits<T>(o[2 * c + 1][hr + 2] * inv);
            if (p.out_aligned4) {
              reinterpret_cast<uint32_t*>(dst)[0] = v0 | (static_cast<uint32_t>(v1) << 16);
              reinterpret_cast<uint32_t*>(dst)[1] = v2 | (static_cast<uint32_t>(v3) << 16);
            } else {
              dst[0] = v0;
              dst[1] = v1;
              dst[2] = v2;
              dst[3] = v3;
            }
          }
        } else if constexpr (kSwap) {  // dims 16 mt + gid (+ 8)
#pragma unroll
          for (int mt = 0; mt < kOT; ++mt) {
            if (mt * 16 >= hd) break;
            row_out[mt * 16 + gid] = to_bits<T>(o[mt][hr] * inv);
            row_out[mt * 16 + gid + 8] = to_bits<T>(o[mt][hr + 2] * inv);
          }
        } else {  // dims 8 nt + 2 t4 (+ 1)
          uint16_t* dst = row_out + 2 * t4;
#pragma unroll
          for (int nt = 0; nt < kOT; ++nt) {
            if (nt * 8 >= hd) break;
            const uint16_t lo = to_bits<T>(o[nt][2 * hr] * inv);
            const uint16_t hi = to_bits<T>(o[nt][2 * hr + 1] * inv);
            if (p.out_aligned4) {
              *reinterpret_cast<uint32_t*>(dst + nt * 8) = lo | (static_cast<uint32_t>(hi) << 16);
            } else {
              dst[nt * 8] = lo;
              dst[nt * 8 + 1] = hi;
            }
          }
        }
        if (p.lse != nullptr && lse_lane) {
          p.lse[head * p.lse_head_stride + token] = lse2 * 0.69314718055994531f;
        }
      } else {
        const int64_t wi =
            (static_cast<int64_t>(range + b) * p.num_kv_heads + kvh) * p.rows + r;
        float* const row_ws = p.ws_o + wi * D;
        if constexpr (kSwap && kIsFp8<KV>) {  // dims 32 c + 4 gid .. + 3
#pragma unroll
          for (int c = 0; c < kOT / 2; ++c) {
            *reinterpret_cast<float4*>(row_ws + 32 * c + 4 * gid) =
                make_float4(o[2 * c][hr] * inv, o[2 * c][hr + 2] * inv, o[2 * c + 1][hr] * inv,
                            o[2 * c + 1][hr + 2] * inv);
          }
        } else if constexpr (kSwap) {
#pragma unroll
          for (int mt = 0; mt < kOT; ++mt) {
            row_ws[mt * 16 + gid] = o[mt][hr] * inv;
            row_ws[mt * 16 + gid + 8] = o[mt][hr + 2] * inv;
          }
        } else {
#pragma unroll
          for (int nt = 0; nt < kOT; ++nt) {
            *reinterpret_cast<float2*>(row_ws + nt * 8 + 2 * t4) =
                make_float2(o[nt][2 * hr] * inv, o[nt][2 * hr + 1] * inv);
          }
        }
        if (lse_lane) p.ws_lse[wi] = lse2;
      }
    }
  };

  float o[kOT][4];
  float m[2];
  float l[2];
  auto reset_state = [&]() {
#pragma unroll
    for (int nt = 0; nt < kOT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    m[0] = m[1] = kNegInf;
    l[0] = l[1] = 0.0f;
  };

  // Empty sequences this CTA owns: zeros (and lse -inf) for this warp's rows.
  reset_state();
  if (src.stream) {
    for (int b = part; b < B; b += src.parts) {
      if (src.prefix[b + 1] == src.prefix[b]) write_piece(b, true, part, o, m, l);
    }
  } else {
    for (int b = part; b < B; b += p.parts) {
      if (seq_len(p, b, false) == 0) write_piece(b, true, part, o, m, l);
    }
  }

  // ---- the tile pipeline of this warp ----
  const int stages = p.stages;
  uint8_t* const tiles = smem + p.prefix_bytes;
  [[maybe_unused]] TmaRing<L> ring;  // kTma: the stages and their mbarriers (decode_tma.cuh)
  uint32_t wbase = 0;
  if constexpr (kTma) {
    ring.init(smem_u32(tiles), warp, static_cast<int>(blockDim.x >> 5), stages, lane);
    wbase = ring.tiles;
  } else if constexpr (kSweep) {  // the ring of the warp's head, shared by its row chunks
    wbase = smem_u32(tiles) +
            static_cast<uint32_t>((warp / p.rc_per_cta) * stages * L::kStageBytes);
  } else {
    wbase = smem_u32(tiles) + static_cast<uint32_t>(warp * stages * L::kStageBytes);
  }

  Cursor cc;  // the tile computed next
  cc.k = 0;
  seek<kExt>(p, src, src.stream ? lower_bound_smem(src.prefix, B, src.g0 + 1) - 1 : part, cc,
             src.g0);
  if constexpr (kDynamicCode) {  // the CTA's first claim, ahead
    if (src.ranges.ndyn > 0 && lane == 0) {
      claim_entry_if_first(src.ring, 1, src.claim_word, src.ranges, p.fault_word);
    }
  }
  Cursor ic = cc;  // the tile issued next
  Cursor pc = ic;  // the one after it
  advance<kExt>(p, src, pc);
  // Block id and in-block offset of key (lane & 15) of ic's tile (lanes 0-15) and of pc's
  // tile (lanes 16-31); offset -1: past the sequence's end.
  int nid = 0, noff = -1;
  auto load_ids = [&](const Cursor& c, bool mine) {
    if (!mine) return;
    nid = 0;
    noff = -1;
    if (c.done) return;
    const int key = c.t * kDecodeTileKeys + (lane & 15);
    bool visited = key < c.len;
    if constexpr (kExt) visited = visited && key >= first_key(p, c.b, c.len);  // else zeros
    if (visited) {
      const int page = key_page(p, key, noff);
      nid = __ldg(p.block_table + static_cast<int64_t>(c.b) * p.bt_stride + page);
    }
  };
  load_ids(ic, lane < 16);
  load_ids(pc, lane >= 16);

  [[maybe_unused]] CtaSweepLane sweep{};  // kSweep: this thread's share of the CTA's copies
  if constexpr (kSweep) {
    sweep = cta_sweep_lane<KV, D>(stages, (slice % p.head_blocks) * p.heads_per_cta,
                                  p.heads_per_cta);
  }
  auto issue = [&](int stage) {
    if constexpr (kTma) {
      ring.template issue<false>(p, stage, nid, noff, lane, kvh, 0);
      if (p.tma_prefetch != 0) ring.prefetch_next(p, nid, noff, lane, kvh);
    } else if constexpr (kSweep) {
      issue_tile_cta_sweep<KV, D>(p, smem_u32(tiles), stage, sweep, nid, noff, lane);
    } else {
      issue_tile<KV, D, kAligned16, false, kIssue>(p, wbase + stage * L::kStageBytes, nid, noff,
                                                   lane, kvh, 0);
    }
  };
  // After issuing ic: ic <- pc, whose ids move to lanes 0-15; pc advances and lanes 16-31
  // load its ids (in flight while the next tiles are computed).
  auto step_issue = [&]() {
    const int id_hi = __shfl_down_sync(0xffffffffu, nid, 16);
    const int off_hi = __shfl_down_sync(0xffffffffu, noff, 16);
    if (lane < 16) {
      nid = id_hi;
      noff = off_hi;
    }
    ic = pc;
    advance<kExt>(p, src, pc);
    load_ids(pc, lane >= 16);
  };

  for (int st = 0; st < stages - 1; ++st) {
    if (!ic.done) {
      issue(st);
      step_issue();
    }
    if constexpr (!kTma) cp_async_commit();
  }

  // Query fragments of the piece starting at c (rows past `rows` are zero), its causal limits
  // (key j is visible to row r iff j < limit[r]) and a fresh softmax state.
  uint32_t qf[D / 16][kSwap ? 2 : 4];
  float piece_scale_log2 = scale_log2;  // times fp8_q_to_f16's 2^e for the piece's Q
  int limit[2] = {0, 0};
  int min_limit = 0, warp_limit = 0;
  DecodeMods mods;  // kExt only
  // kTma: the piece's sequence's first visited key (TmaRing::clear_unvisited; 0 when plain).
  [[maybe_unused]] int first_visited = 0;
  auto begin_piece = [&](const Cursor& c) {
    const int len = c.len;
    // fp8: Q's dims in the order of K's conversion (decode_fp8_q_dim).
    [[maybe_unused]] const bool fp8_adjacent = kIsFp8<KV> && fp8_q_adjacent<T, KV, D>(p);
    if constexpr (kTma && kExt) first_visited = first_key(p, c.b, len);
    // The query row of row r of the unit for sequence c.b (null past p.rows).
    auto q_row = [&](int r) -> const uint16_t* {
      if (r >= p.rows) return nullptr;
      const int i = r / p.group;
      const int64_t token = static_cast<int64_t>(c.b) * p.q_len + i;
      const int head = kvh * p.group + (r - i * p.group);
      return static_cast<const uint16_t*>(p.q) + token * p.q_stride +
             static_cast<int64_t>(head) * hd;
    };
    if constexpr (kSwap) {  // Q^T: row gid; limits of rows 2 t4, 2 t4 + 1
      const uint16_t* qrow = q_row(rc * kSwapRows + gid);
      load_q_swap<D, kIsFp8<KV>>(qf, qrow, qrow != nullptr, t4, hd, fp8_adjacent);
      if constexpr (!kExt) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int i = (rc * kSwapRows + 2 * t4 + hr) / p.group;
          limit[hr] = p.causal ? min(len, i + len - p.q_len + 1) : len;
        }
      }
    } else {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = rc * kDecodeRows + gid + 8 * hr;
        const uint16_t* qrow = q_row(r);
        const bool valid = qrow != nullptr;
        const int i = r / p.group;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            uint32_t v = 0;
            if (valid && ks * 16 < hd) {  // a padded tile's dims past head_dim: 0
              const int d = kIsFp8<KV> ? decode_fp8_q_dim(ks, half, t4, fp8_adjacent)
                                       : ks * 16 + half * 8 + 2 * t4;
              const int d2 = d + (kIsFp8<KV> ? fp8_q_pair_step(fp8_adjacent) : 1);
              v = static_cast<uint32_t>(qrow[d]) | (static_cast<uint32_t>(qrow[d2]) << 16);
            }
            qf[ks][hr + 2 * half] = v;
          }
        }
        if constexpr (!kExt) limit[hr] = p.causal ? min(len, i + len - p.q_len + 1) : len;
      }
    }
    if constexpr (kIsFp8<KV>) {
      piece_scale_log2 = fp8_q_in_f16<T, KV, D>(p) ? scale_log2 * fp8_q_to_f16(qf) : scale_log2;
    }
    if constexpr (kExt && kSwap) {
      mods.init_rows(p, c.b, len, kvh, rc * kSwapRows + 2 * t4, rc * kSwapRows + 2 * t4 + 1);
    } else if constexpr (kExt) {
      mods.init(p, c.b, len, kvh, rc, gid);
    } else {
      min_limit = min(limit[0], limit[1]);
      warp_limit = __reduce_max_sync(0xffffffffu, max(limit[0], limit[1]));
    }
    reset_state();
  };
  if (!cc.done) begin_piece(cc);  // its loads overlap the first tiles' latency

  int cstage = 0, istage = stages - 1;
  while (!cc.done) {
    if constexpr (kTma) {
      ring.wait(cstage, stages);
      // The sequence's last tile (and an extended kernel's first): V rows past the length
      // (before the first key) hold the page's other rows.
      ring.clear_unvisited(cstage, cc.t * kDecodeTileKeys, first_visited, cc.len, lane);
    } else {
      cp_async_wait_dyn(stages - 2);
    }
    // This tile landed for every lane (kSweep: every thread's copies of every head's tile);
    // the stage refilled below is free (kSweep: every warp finished with it).
    if constexpr (kSweep) {
      __syncthreads();
    } else {
      __syncwarp();
    }
    if (!ic.done) {
      issue(istage);
      step_issue();
    }
    if constexpr (!kTma) cp_async_commit();
    if (++istage == stages) istage = 0;

    const int key0 = cc.t * kDecodeTileKeys;
    // Else every key of the tile is masked for every row.
    if (kExt ? mods.tile_has_work(key0) : key0 < warp_limit) {
      if constexpr (kSwap) {
        attend_tile_swap<T, KV, D, kExt, L>(wbase + cstage * L::kStageBytes, qf, o, m, l, key0,
                                            limit, min_limit, piece_scale_log2, lane, p, mods);
      } else {
        attend_tile<T, KV, D, kExt, L>(wbase + cstage * L::kStageBytes, qf, o, m, l, key0,
                                       limit, min_limit, piece_scale_log2, lane, p, mods);
      }
    }
    if (++cstage == stages) cstage = 0;

    const bool piece_done = cc.t + 1 == cc.t_end;
    if (piece_done) {
      if constexpr (kIsFp8<KV> && kSwap) {  // O^T stays in fp8_swap_o_dim's order
        const float v_scale = unit_v_scale<KV>(p, kvh);
#pragma unroll
        for (int mt = 0; mt < kOT; ++mt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][e] *= v_scale;
        }
      } else if constexpr (kIsFp8<KV>) {
        fp8_restore_o<D>(o, unit_v_scale<KV>(p, kvh), lane);
      }
      float lq[2];
      if constexpr (kSwap) {
        reduce_l_swap(l, lq);
      } else {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          lq[hr] = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
          lq[hr] += __shfl_xor_sync(0xffffffffu, lq[hr], 2);
        }
      }
      const bool direct = cc.t0 == first_tile<kExt>(p, cc.b, cc.len) && cc.t_end == tiles_of(cc.len);
      write_piece(cc.b, direct, src.range(cc.k), o, m, lq);
    }
    advance<kExt>(p, src, cc);
    if (piece_done) {
      // The dynamic split: this warp's entry, for claimers that would reuse a slot.
      if constexpr (kDynamicCode) {
        if (src.ranges.ndyn > 0 && lane == 0) {
          atomicExch(src.ring->warp_entry + warp, cc.done ? INT_MAX : cc.k);
        }
      }
      if (!cc.done) begin_piece(cc);
    }
  }
  cp_async_wait<0>();
  if (p.probe != nullptr && lane == 0) probe_row(p)[2 + warp] = global_ns();
}

}  // namespace
}  // namespace kvattn::cuda
