// Paged decode attention on the GPU: split-KV flash-decoding with tensor cores.
//
// Decode reads every cached K and V byte once and does ~2 FLOPs per byte, so it is bound by
// memory bandwidth. The kernel (decode_params.h has the work decomposition) keeps HBM busy:
// - a CTA holds up to 8 KV heads, one warp each (the GQA group x q_len tokens as the 16 rows
//   of one mma tile, so each KV byte is read once); the warps walk the same keys, so every
//   token's K/V row of the CTA's heads (contiguous in the cache) is read at once;
// - each warp runs its own 16-byte cp.async pipeline of 16-key K+V tiles (3 stages at head_dim
//   128, ~192 KB per CTA of 8 warps): no CTA-wide barrier in the loop; block-table entries are
//   loaded two tiles ahead; keys past the end or behind a bad block id are zero-filled;
// - QK^T and PV are mma.sync m16n8k16 (bf16/fp16 in, fp32 accumulate) on ldmatrix fragments of
//   an XOR-swizzled tile (conflict-free); online softmax in the log2 domain, P in registers;
// - stream-K: the CTAs cut the concatenated tiles of the whole batch into equal ranges, so long
//   and short sequences alike spread over every SM; a merge kernel combines the pieces of the
//   sequences a range boundary cut;
// - small batches (few sequences x KV heads; decode_params.h "small mode") take a second kernel
//   instead: one KV head per CTA, its warps split a chunk of one sequence's keys and combine
//   on chip; the last chunk's CTA merges the others' pieces, which it polls as tagged LL words
//   (no fence, no flag, no merge kernel); its K/V copies are marked evict-first in L2 (read
//   once). On the H200 it streams 8 x 32768 at 4.25-4.3 TB/s (the stream kernel: 3.99) and a
//   lone 8192-key sequence in 19.2-20.1 us after do_bench's memset flush (17.2-17.8 with a
//   clean L2; docs/perf/NOTES.md, session 4).
// No host sync and no allocation: capturable in a CUDA graph given the plan and workspace.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_fp8.cuh"
#include "kernels/cuda/decode_params.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/ptx.cuh"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

// ---- building blocks (kernels/cuda/ptx.cuh has the fragment layouts) ----------------------
using ptx::cp_async_16;  // (dst, src, valid): !valid zero-fills the 16 bytes, reads nothing
using ptx::cp_async_16_hint;
using ptx::l2_policy;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_16816;
using ptx::pack2;
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return ptx::smem_addr(p); }
__device__ __forceinline__ float fast_exp2(float x) { return ptx::exp2_approx(x); }  // exp2(-inf) = +0

__device__ __forceinline__ void st_shared_16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Eight 16-bit elements from an address that is only 2-byte aligned.
template <typename T>
__device__ __forceinline__ uint4 load_8_unaligned(const T* src) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = static_cast<uint32_t>(__ldg(s + 2 * j)) | (static_cast<uint32_t>(__ldg(s + 2 * j + 1)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

constexpr float kNegInf = -INFINITY;
// Most chunks per (sequence, unit) in small mode (bounds the merger's serial work).
constexpr int kSmallMaxChunks = 1024;

// A cache_seqlens value clamped to the table's capacity; a bad value is recorded by `report`.
__device__ __forceinline__ int clamp_len(const DecodeParams& p, int len, bool report) {
  if (len < 0 || len > p.capacity) {
    if (report) record_fault(p.fault_word, kFaultSeqlenOutOfRange);
    return len < 0 ? 0 : p.capacity;
  }
  return len;
}

// Keys of sequence b, clamped (clamp_len).
__device__ __forceinline__ int seq_len(const DecodeParams& p, int b, bool report) {
  return clamp_len(p, __ldg(p.cache_seqlens + b), report);
}

// ---- the split kernel: multi-head CTAs, one pipeline per warp, stream-K ranges -------------

// One warp's stage: the K tile, then the V tile, of kDecodeTileKeys keys; rows of D*2 bytes
// whose 16-byte chunks are XOR-swizzled by key, so ldmatrix is free of bank conflicts.
template <int D>
struct Tile {
  static constexpr int kChunks = D / 8;                          // 16-byte chunks per row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kTileBytes = kDecodeTileKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kElemsPerChunk = 8;
  static constexpr int kKeyStep = 32 / kChunks;                  // keys between a lane's copies
  static constexpr int kCopies = kDecodeTileKeys / kKeyStep;     // copies per lane per K tile
  static_assert(32 % kChunks == 0 && kDecodeTileKeys % kKeyStep == 0);
  __device__ __forceinline__ static uint32_t addr(uint32_t base, int key, int chunk) {
    return base + key * kRowBytes + ((chunk ^ (key & 7)) << 4);
  }
};

// The cache element type KV: the query's 16-bit type (Tile) or uint8_t, float8_e4m3 codes
// (Fp8Tile, decode_fp8.cuh).
template <typename KV>
inline constexpr bool kIsFp8 = sizeof(KV) == 1;
template <typename KV, int D>
using KvTile = std::conditional_t<kIsFp8<KV>, Fp8Tile<D>, Tile<D>>;

// Sixteen bytes from an address with no alignment guarantee (fp8 caches' slow path).
__device__ __forceinline__ uint4 load_16_bytes_unaligned(const uint8_t* src) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = static_cast<uint32_t>(__ldg(src + 4 * j)) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 1)) << 8) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 2)) << 16) |
           (static_cast<uint32_t>(__ldg(src + 4 * j + 3)) << 24);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ int tiles_of(int len) {
  return (len + kDecodeTileKeys - 1) / kDecodeTileKeys;
}

// Waits until at most n of this thread's cp.async groups are pending (n run-time, < 8).
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

// Copies one warp's K and V tile (kDecodeTileKeys keys of KV head kvh) into the stage at kdst.
// Key k's block id and in-block offset are lane k's (nid, noff); offset -1 (past the end) and
// bad block ids are zero-filled, and a bad id is recorded in the fault word. kHint: the
// copies carry the L2 cache `policy` (the small kernel: l2_policy(p.kv_evict_first)); the
// stream kernel copies without one (the hinted form was 3% slower there on the H200).
template <typename KV, int D, bool kAligned16, bool kHint>
__device__ __forceinline__ void issue_tile(const DecodeParams& p, uint32_t kdst, int nid,
                                           int noff, int lane, int kvh, uint64_t policy) {
  using L = KvTile<KV, D>;
  const KV* const k_cache = static_cast<const KV*>(p.k_cache);
  const KV* const v_cache = static_cast<const KV*>(p.v_cache);
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * D;
  const int copy_chunk = lane % L::kChunks;
  const int copy_key0 = lane / L::kChunks;
  const int64_t head_off = static_cast<int64_t>(kvh) * D + copy_chunk * L::kElemsPerChunk;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int key_local = copy_key0 + i * L::kKeyStep;
    const int id = __shfl_sync(0xffffffffu, nid, key_local);
    const int off = __shfl_sync(0xffffffffu, noff, key_local);
    const uint32_t dst = L::addr(kdst, key_local, copy_chunk);
    const bool in_range = off >= 0;
    const bool id_ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.num_blocks);
    if (in_range && !id_ok) record_fault(p.fault_word, kFaultBlockOutOfRange);
    const bool ok = in_range && id_ok;
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

// One warp's step over a landed 16-key tile at kbase (V at kbase + kTileBytes): S = Q K^T,
// causal mask (key j visible to row hr iff j < limit[hr]), online softmax in the log2 domain
// (m, l per row; l summed over the lane's own columns only), O = O * alpha + P V.
template <typename T, typename KV, int D>
__device__ __forceinline__ void attend_tile(uint32_t kbase, const uint32_t (&qf)[D / 16][4],
                                            float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                            int key0, const int (&limit)[2], int min_limit,
                                            float scale_log2, int lane) {
  using L = KvTile<KV, D>;
  const int t4 = lane & 3;
  const int mrow = lane & 7;
  const int mat = lane >> 3;
  const uint32_t vbase = kbase + L::kTileBytes;
  // S = Q K^T over D in two independent mma chains (even and odd k-steps).
  float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  if constexpr (kIsFp8<KV>) {
    fp8_qk<T, D>(kbase, qf, s, s2, lane);
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
  if (key0 + kDecodeTileKeys > min_limit) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t4 + (e & 1);
        if (key >= limit[e >> 1]) s[nt][e] = kNegInf;
      }
    }
  }
  // Online softmax (log2 domain) for rows g (hr 0) and g+8 (hr 1).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = fmaxf(fmaxf(s[0][2 * hr], s[0][2 * hr + 1]), fmaxf(s[1][2 * hr], s[1][2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[hr], mx);
    const float base = m_new == kNegInf ? 0.0f : m_new;
    const float alpha = fast_exp2(m[hr] - base);
    m[hr] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][2 * hr] = fast_exp2(s[nt][2 * hr] - base);
      s[nt][2 * hr + 1] = fast_exp2(s[nt][2 * hr + 1] - base);
      sum += s[nt][2 * hr] + s[nt][2 * hr + 1];
    }
    l[hr] = l[hr] * alpha + sum;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][2 * hr] *= alpha;
      o[nt][2 * hr + 1] *= alpha;
    }
  }
  const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                          pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
  if constexpr (kIsFp8<KV>) {
    fp8_pv<T, D>(vbase, pa, o, lane);
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

// First index in [0, n] with a[i] >= x (a non-decreasing).
__device__ __forceinline__ int lower_bound_smem(const int* a, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// A position in a CTA's stream of tiles: tile t of sequence b, inside the segment
// [t0, t_end) of b's tiles that this CTA computes.
struct Cursor {
  int b;
  int t;
  int t0;
  int t_end;
  int len;
  bool done;
};

// Where a CTA's tiles come from: a range [g0, g1) of the concatenated tiles (stream mode,
// prefix = tile prefix sum in shared memory) or sequences part, part + parts, ... (whole mode).
struct Source {
  const int* prefix;
  int g0, g1;
  int part, parts;
  bool stream;
};

// Moves c to the first non-empty segment of sequence `b` or a later one.
__device__ __forceinline__ void seek(const DecodeParams& p, const Source& s, int b, Cursor& c) {
  if (s.stream) {
    while (b < p.num_seqs && s.prefix[b + 1] == s.prefix[b]) ++b;
    if (b >= p.num_seqs || s.prefix[b] >= s.g1) {
      c.done = true;
      return;
    }
    const int base = s.prefix[b];
    c.b = b;
    c.t0 = c.t = max(s.g0 - base, 0);
    c.t_end = min(s.prefix[b + 1], s.g1) - base;
    c.len = seq_len(p, b, false);
    c.done = false;
  } else {
    int len = 0;
    while (b < p.num_seqs && (len = seq_len(p, b, false)) == 0) b += s.parts;
    if (b >= p.num_seqs) {
      c.done = true;
      return;
    }
    c.b = b;
    c.t0 = c.t = 0;
    c.t_end = tiles_of(len);
    c.len = len;
    c.done = false;
  }
}

__device__ __forceinline__ void advance(const DecodeParams& p, const Source& s, Cursor& c) {
  if (c.done) return;
  if (++c.t < c.t_end) return;
  seek(p, s, s.stream ? c.b + 1 : c.b + s.parts, c);
}

template <typename T, typename KV, int D, bool kAligned16>
__global__ void __launch_bounds__(kDecodeMaxWarps * 32)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  using L = KvTile<KV, D>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int slice = blockIdx.x % p.slices;
  const int part = blockIdx.x / p.slices;
  const int kvh = (slice % p.head_blocks) * p.heads_per_cta + warp / p.rc_per_cta;
  const int rc = (slice / p.head_blocks) * p.rc_per_cta + warp % p.rc_per_cta;
  const bool unit_ok = kvh < p.num_kv_heads && rc < p.row_chunks;
  const int B = p.num_seqs;

  Source src;
  src.prefix = reinterpret_cast<const int*>(smem);
  src.part = part;
  src.parts = p.parts;
  src.stream = p.stream != 0;
  src.g0 = src.g1 = 0;
  int b_lo = 0, b_hi = 0, total = 0;
  if (src.stream) {
    // Exclusive prefix sum of the sequences' tile counts: prefix[0..B], warp sums after it.
    int* prefix = reinterpret_cast<int*>(smem);
    int* wsum = prefix + B + 1;
    const int per = (B + blockDim.x - 1) / blockDim.x;
    const int lo = min(B, tid * per);
    const int hi = min(B, lo + per);
    int sum = 0;
    for (int b = lo; b < hi; ++b) {
      const int t = tiles_of(seq_len(p, b, blockIdx.x == 0));
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
    const int nparts = max(1, min(p.parts, min(total, p.part_cap)));
    if (part >= nparts) return;  // CTA-uniform
    src.parts = nparts;
    src.g0 = static_cast<int>(static_cast<int64_t>(part) * total / nparts);
    src.g1 = static_cast<int>(static_cast<int64_t>(part + 1) * total / nparts);
    // This range owns the sequences whose first tile lies in it (the last range also those
    // starting at the end): it writes their meta, and zeros for the empty ones.
    b_lo = lower_bound_smem(prefix, B, src.g0);
    b_hi = part == nparts - 1 ? B : lower_bound_smem(prefix, B, src.g1);
    if (slice == 0 && warp == 0) {
      for (int b = b_lo + lane; b < b_hi; b += 32) {
        const int first = prefix[b];
        const int n = prefix[b + 1] - first;
        int pieces = 0;
        if (n > 0) {
          const int last_part =
              static_cast<int>((static_cast<int64_t>(first + n) * nparts - 1) / total);
          pieces = last_part - part + 1;
        }
        p.ws_meta[2 * b] = part + b;
        p.ws_meta[2 * b + 1] = pieces;
      }
    }
  } else {
    if (slice == 0 && tid == 0) {
      for (int b = part; b < B; b += p.parts) (void)seq_len(p, b, true);  // report bad lengths
    }
  }
  if (!unit_ok) return;  // no CTA-wide barrier below

  const int gid = lane >> 2;  // mma row group
  const int t4 = lane & 3;    // mma thread in group
  const float scale_log2 = unit_scale_log2<KV>(p, kvh);

  // Writes a finished piece of sequence b: o, m (log2 domain, scaled), l (summed over the quad)
  // of this warp's rows, to out (+ lse) when the piece is all of b, else to slot part + b.
  auto write_piece = [&](int b, bool direct, const float (&o)[D / 8][4], const float (&m)[2],
                         const float (&l)[2]) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = rc * kDecodeRows + gid + 8 * hr;
      if (r >= p.rows) continue;
      const int i = r / p.group;
      const int head = kvh * p.group + (r - i * p.group);
      const int64_t token = static_cast<int64_t>(b) * p.q_len + i;
      const float inv = l[hr] > 0.0f ? 1.0f / l[hr] : 0.0f;
      const float lse2 = l[hr] > 0.0f ? m[hr] + __log2f(l[hr]) : kNegInf;
      if (direct) {
        uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                        static_cast<int64_t>(head) * D + 2 * t4;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          const uint16_t lo = to_bits<T>(o[nt][2 * hr] * inv);
          const uint16_t hi = to_bits<T>(o[nt][2 * hr + 1] * inv);
          if (p.out_aligned4) {
            *reinterpret_cast<uint32_t*>(dst + nt * 8) = lo | (static_cast<uint32_t>(hi) << 16);
          } else {
            dst[nt * 8] = lo;
            dst[nt * 8 + 1] = hi;
          }
        }
        if (p.lse != nullptr && t4 == 0) {
          p.lse[head * p.lse_head_stride + token] = lse2 * 0.69314718055994531f;
        }
      } else {
        const int64_t wi =
            (static_cast<int64_t>(part + b) * p.num_kv_heads + kvh) * p.rows + r;
        float* dst = p.ws_o + wi * D + 2 * t4;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          *reinterpret_cast<float2*>(dst + nt * 8) =
              make_float2(o[nt][2 * hr] * inv, o[nt][2 * hr + 1] * inv);
        }
        if (t4 == 0) p.ws_lse[wi] = lse2;
      }
    }
  };

  float o[D / 8][4];
  float m[2];
  float l[2];
  auto reset_state = [&]() {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    m[0] = m[1] = kNegInf;
    l[0] = l[1] = 0.0f;
  };

  // Empty sequences this CTA owns: zeros (and lse -inf) for this warp's rows.
  reset_state();
  if (src.stream) {
    for (int b = b_lo; b < b_hi; ++b) {
      if (src.prefix[b + 1] == src.prefix[b]) write_piece(b, true, o, m, l);
    }
  } else {
    for (int b = part; b < B; b += p.parts) {
      if (seq_len(p, b, false) == 0) write_piece(b, true, o, m, l);
    }
  }

  // ---- the tile pipeline of this warp ----
  const int stages = p.stages;
  uint8_t* const tiles = smem + p.prefix_bytes;
  const uint32_t wbase = smem_u32(tiles) + static_cast<uint32_t>(warp * stages * L::kStageBytes);

  Cursor cc;  // the tile computed next
  seek(p, src, src.stream ? lower_bound_smem(src.prefix, B, src.g0 + 1) - 1 : part, cc);
  Cursor ic = cc;  // the tile issued next
  Cursor pc = ic;  // the one after it
  advance(p, src, pc);
  // Block id and in-block offset of key (lane & 15) of ic's tile (lanes 0-15) and of pc's
  // tile (lanes 16-31); offset -1: past the sequence's end.
  int nid = 0, noff = -1;
  auto load_ids = [&](const Cursor& c, bool mine) {
    if (!mine) return;
    nid = 0;
    noff = -1;
    if (c.done) return;
    const int key = c.t * kDecodeTileKeys + (lane & 15);
    if (key < c.len) {
      const int page = key / p.block_size;
      nid = __ldg(p.block_table + static_cast<int64_t>(c.b) * p.bt_stride + page);
      noff = key - page * p.block_size;
    }
  };
  load_ids(ic, lane < 16);
  load_ids(pc, lane >= 16);

  auto issue = [&](int stage) {
    issue_tile<KV, D, kAligned16, false>(p, wbase + stage * L::kStageBytes, nid, noff, lane, kvh,
                                         0);
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
    advance(p, src, pc);
    load_ids(pc, lane >= 16);
  };

  for (int st = 0; st < stages - 1; ++st) {
    if (!ic.done) {
      issue(st);
      step_issue();
    }
    cp_async_commit();
  }

  // Query fragments of the piece starting at c (rows past `rows` are zero), its causal limits
  // (key j is visible to row r iff j < limit[r]) and a fresh softmax state.
  uint32_t qf[D / 16][4];
  int limit[2] = {0, 0};
  int min_limit = 0, warp_limit = 0;
  auto begin_piece = [&](const Cursor& c) {
    const int len = c.len;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = rc * kDecodeRows + gid + 8 * hr;
      const bool valid = r < p.rows;
      const int i = r / p.group;
      const uint16_t* qrow = nullptr;
      if (valid) {
        const int64_t token = static_cast<int64_t>(c.b) * p.q_len + i;
        const int head = kvh * p.group + (r - i * p.group);
        qrow = static_cast<const uint16_t*>(p.q) + token * p.q_stride + static_cast<int64_t>(head) * D;
      }
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          uint32_t v = 0;
          if (valid) {
            const int d = kIsFp8<KV> ? decode_fp8_q_dim(ks, half, t4) : ks * 16 + half * 8 + 2 * t4;
            const int d2 = d + (kIsFp8<KV> ? kFp8QPairStep : 1);
            v = static_cast<uint32_t>(qrow[d]) | (static_cast<uint32_t>(qrow[d2]) << 16);
          }
          qf[ks][hr + 2 * half] = v;
        }
      }
      limit[hr] = p.causal ? min(len, i + len - p.q_len + 1) : len;
    }
    min_limit = min(limit[0], limit[1]);
    warp_limit = __reduce_max_sync(0xffffffffu, max(limit[0], limit[1]));
    reset_state();
  };
  if (!cc.done) begin_piece(cc);  // its loads overlap the first tiles' latency

  int cstage = 0, istage = stages - 1;
  while (!cc.done) {
    cp_async_wait_dyn(stages - 2);
    __syncwarp();  // this tile landed for every lane; the stage refilled below is free
    if (!ic.done) {
      issue(istage);
      step_issue();
    }
    cp_async_commit();
    if (++istage == stages) istage = 0;

    const int key0 = cc.t * kDecodeTileKeys;
    if (key0 < warp_limit) {  // else every key of the tile is masked for every row
      attend_tile<T, KV, D>(wbase + cstage * L::kStageBytes, qf, o, m, l, key0, limit,
                            min_limit, scale_log2, lane);
    }
    if (++cstage == stages) cstage = 0;

    const bool piece_done = cc.t + 1 == cc.t_end;
    if (piece_done) {
      if constexpr (kIsFp8<KV>) fp8_restore_o<D>(o, unit_v_scale<KV>(p, kvh), lane);
      float lq[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        lq[hr] = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
        lq[hr] += __shfl_xor_sync(0xffffffffu, lq[hr], 2);
      }
      const bool direct = cc.t0 == 0 && cc.t_end == tiles_of(cc.len);
      write_piece(cc.b, direct, o, m, lq);
    }
    advance(p, src, cc);
    if (piece_done && !cc.done) begin_piece(cc);
  }
  cp_async_wait<0>();
}

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
// The tag of a launch whose unit found `gen` in its word of ws_gen (the previous launch's tag;
// the merger stores this launch's there): a hash of gen and the host's epoch, never gen itself,
// so the words the previous launch of the same layout left behind are always stale, and any
// other leftover (another layout's words or gens, a fresh workspace) matches with odds 2^-32.
__device__ __forceinline__ uint32_t ll_tag_after(uint32_t gen, uint32_t epoch) {
  uint32_t x = gen ^ epoch ^ 0x9e3779b9u;  // murmur3's finalizer
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x != gen ? x : x ^ 1u;
}

// Diagnostics (p.probe): the device's nanosecond timer, and one phase stamp of this CTA (clock
// cycles since its entry) written by thread 0. Null probe: nothing is written.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
// This CTA's kDecodeProbeSlots stamps in p.probe (non-null probe only).
__device__ __forceinline__ unsigned long long* probe_row(const DecodeParams& p) {
  const int64_t cta =
      (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  return p.probe + cta * kDecodeProbeSlots;
}
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

// Polls before the merger gives up on a piece (each poll is an L2 round trip: seconds in all).
// Unreachable while every CTA of the launch runs; a guard against a hang, not a code path.
constexpr int kMaxPolls = 1 << 22;

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

template <typename T, typename KV, int D, bool kAligned16>
__global__ void __launch_bounds__(kDecodeMaxWarps * 32)
    decode_small_kernel(const __grid_constant__ DecodeParams p) {
  using L = KvTile<KV, D>;
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

  // The length first: everything else waits on it (the loads below fly with it). Then the
  // unit's gen word, which gives this launch's LL tag (needed only at the end).
  const int len_raw = __ldg(p.cache_seqlens + b);
  uint32_t* const gen_word = p.ws_gen + static_cast<int64_t>(b) * gridDim.y + unit;
  const uint32_t gen = __ldcg(gen_word);

  // This warp's tiles [ta, tb) of chunk c when the sequence has n tiles.
  int ta = 0, tb = 0;
  // Balanced parts (the first n % parts one longer) in 32-bit arithmetic: 64-bit divisions are
  // ~100-instruction subroutines on the prologue's critical path.
  auto part_begin = [](int n, int parts, int i) {
    const int q = n / parts;
    return q * i + min(i, n - q * parts);
  };
  auto split = [&](int n) {
    const int ct0 = part_begin(n, C, c);
    const int len_c = part_begin(n, C, c + 1) - ct0;
    ta = ct0 + part_begin(len_c, nw, warp);
    tb = ct0 + part_begin(len_c, nw, warp + 1);
  };
  // Lanes 0-15: (block id, offset) of key (lane & 15) of tile ti; lanes 16-31: of tile ti + 1.
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
      const int page = key / p.block_size;
      nid = __ldg(p.block_table + static_cast<int64_t>(b) * p.bt_stride + page);
      noff = key - page * p.block_size;
    }
  };
  // The first two tiles' ids from the guessed length, in flight together with the length.
  const int guess_tiles = tiles_of(p.len_hint);
  split(guess_tiles);
  load_ids(ta, lane < 16);
  load_ids(ta + 1, lane >= 16);

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

  const int len = clamp_len(p, len_raw, c == 0 && unit == 0 && tid == 0);
  const int ntiles = tiles_of(len);
  if (ntiles != guess_tiles) {  // wrong guess: this warp's range and its ids again
    split(ntiles);
    load_ids(ta, lane < 16);
    load_ids(ta + 1, lane >= 16);
  }
  if ((lane < 16 ? ta : ta + 1) * kDecodeTileKeys + (lane & 15) >= len) noff = -1;
  probe_stamp(p, 3, c0);
  int limit[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    limit[hr] = p.causal ? min(len, row_i[hr] + len - p.q_len + 1) : len;
  }
  const int min_limit = min(limit[0], limit[1]);
  const int warp_limit = __reduce_max_sync(0xffffffffu, max(limit[0], limit[1]));

  float o[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};

  // ---- this warp's tiles [ta, tb): the same pipeline as the stream kernel ----
  const int stages = p.stages;
  const uint32_t wbase = smem_u32(smem) + static_cast<uint32_t>(warp * stages * L::kStageBytes);
  const uint64_t kv_policy = l2_policy(p.kv_evict_first != 0);
  int ti = ta;
  auto issue_next = [&](int stage) {
    issue_tile<KV, D, kAligned16, true>(p, wbase + stage * L::kStageBytes, nid, noff, lane, kvh,
                                        kv_policy);
    const int id_hi = __shfl_down_sync(0xffffffffu, nid, 16);
    const int off_hi = __shfl_down_sync(0xffffffffu, noff, 16);
    if (lane < 16) {
      nid = id_hi;
      noff = off_hi;
    }
    ++ti;
    load_ids(ti + 1, lane >= 16);
    if ((ti + 1) * kDecodeTileKeys + (lane & 15) >= len && lane >= 16) noff = -1;
  };
  for (int st = 0; st < stages - 1; ++st) {
    if (ti < tb) issue_next(st);
    cp_async_commit();
  }
  // The query tile landed (the oldest group) for every thread: its fragments into registers.
  cp_async_wait_dyn(stages - 1);
  __syncthreads();
  uint32_t qf[D / 16][4];
  if constexpr (kIsFp8<KV>) {  // the fp8 tile's dim order (decode_fp8.cuh)
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const uint16_t* row = s_q + (gid + 8 * hr) * kQRow + decode_fp8_q_dim(ks, half, t4);
          qf[ks][hr + 2 * half] =
              static_cast<uint32_t>(row[0]) | (static_cast<uint32_t>(row[kFp8QPairStep]) << 16);
        }
      }
    }
  } else {
    const int mtx = lane >> 3;
    const uint32_t qbase = smem_u32(s_q + ((mtx & 1) * 8 + (lane & 7)) * kQRow + (mtx >> 1) * 8);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qf[ks], qbase + ks * 32);
  }
  const float scale_log2 = unit_scale_log2<KV>(p, kvh);
  int cstage = 0, istage = stages - 1;
  for (int t = ta; t < tb; ++t) {
    cp_async_wait_dyn(stages - 2);
    __syncwarp();  // this tile landed for every lane; the stage refilled below is free
    if (t == ta) probe_stamp(p, 4, c0);
    if (ti < tb) issue_next(istage);
    cp_async_commit();
    if (++istage == stages) istage = 0;
    const int key0 = t * kDecodeTileKeys;
    if (key0 < warp_limit) {
      attend_tile<T, KV, D>(wbase + cstage * L::kStageBytes, qf, o, m, l, key0, limit,
                            min_limit, scale_log2, lane);
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
  const bool merger = c == C - 1;
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
      arrived = merge_quad_ll<T, D>(p, q, C, rstep, wi0, rc, kvh, b, mine_o, mine_lse, tag) &&
                arrived;
    }
    if (!arrived) record_fault(p.fault_word, kFaultDecodeMergeStalled);
    // Every CTA of the launch read the gen word before it stored its piece, so before this.
    if (tid == 0) *gen_word = tag;
    probe_stamp(p, 8, c0);
  }
  if (p.probe != nullptr && tid == 0) {
    unsigned long long* st = probe_row(p);
    st[0] = t_entry;
    st[1] = global_ns();
    st[2] = static_cast<unsigned long long>(clock64() - c0);
    st[9] = merger ? 1 : 0;
    st[10] = sm_id();
  }
}

// ---- merge of the pieces: wpr warps per output row -------------------------------------------
template <typename T, int D>
__global__ void __launch_bounds__(256) merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kPer = D / 32;  // floats per lane
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
  // Pieces sub, sub + wpr, ... of this row: their max LSE, then the weighted sum.
  const int64_t wi0 = (static_cast<int64_t>(slot0) * p.num_kv_heads + kvh) * p.rows + r;
  const int64_t wstep = static_cast<int64_t>(p.num_kv_heads) * p.rows;
  float mx = kNegInf;
  if (n >= 2) {
    for (int j = sub + wpr * lane; j < n; j += wpr * 32) mx = fmaxf(mx, p.ws_lse[wi0 + j * wstep]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
  float wsum = 0.0f;
  if (n >= 2 && mx != kNegInf) {
    constexpr int kUnroll = 8;  // loads in flight per warp
    for (int j0 = sub; j0 < n; j0 += kUnroll * wpr) {
      float f[kUnroll];
      float x[kUnroll][kPer];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * wpr;
        f[u] = 0.0f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) x[u][e] = 0.0f;
        if (j < n) {
          const int64_t wi = wi0 + j * wstep;
          f[u] = fast_exp2(p.ws_lse[wi] - mx);
          const float* src = p.ws_o + wi * D + lane * kPer;
          if constexpr (kPer == 4) {
            const float4 v = *reinterpret_cast<const float4*>(src);
            x[u][0] = v.x; x[u][1] = v.y; x[u][2] = v.z; x[u][3] = v.w;
          } else {
            const float2 v = *reinterpret_cast<const float2*>(src);
            x[u][0] = v.x; x[u][1] = v.y;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        wsum += f[u];
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] += f[u] * x[u][e];
      }
    }
  }
  if (wpr > 1) {  // combine the row's warps through shared memory
    if (lane == 0) {
      red[warp][D] = mx;
      red[warp][D + 1] = wsum;
    }
#pragma unroll
    for (int e = 0; e < kPer; ++e) red[warp][lane * kPer + e] = acc[e];
    __syncthreads();
    if (sub == 0) {
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
  }
  if (sub != 0 || n < 2) return;
  const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
  uint16_t* dst = static_cast<uint16_t*>(p.out) + token * p.out_stride +
                  static_cast<int64_t>(head) * D + lane * kPer;
#pragma unroll
  for (int e = 0; e < kPer; ++e) dst[e] = to_bits<T>(acc[e] * inv);
  if (p.lse != nullptr && lane == 0) {
    p.lse[head * p.lse_head_stride + token] =
        wsum > 0.0f ? (mx + __log2f(wsum)) * 0.69314718055994531f : kNegInf;
  }
}


// ---- host side -----------------------------------------------------------------------------
constexpr int kMaxDevices = 64;

int kv_bytes_of(DType cache_dtype) { return cache_dtype == DType::kF8E4M3 ? 1 : 2; }

void check_device_index(int device) {
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "decode_attention: device must be in [0, ",
               kMaxDevices, ") but is ", device);
}

int max_optin_smem(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  check_device_index(device);
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// CTAs per SM of the split kernel (kSmall: the small-batch kernel) at (threads, smem); raises
// its shared-memory limit once per device. Cached: the planner and every launch ask.
template <typename T, typename KV, int D, bool kAligned16, bool kSmall = false>
int split_occupancy(int device, int threads, int smem) {
  struct Entry {
    int device, threads, smem, ctas;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  static std::array<bool, kMaxDevices> raised{};
  check_device_index(device);
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.device == device && e.threads == threads && e.smem == smem) return e.ctas;
  }
  DeviceGuard guard(device);
  const auto kernel = kSmall ? decode_small_kernel<T, KV, D, kAligned16>
                             : decode_kernel<T, KV, D, kAligned16>;
  if (!raised[device]) {  // dynamic + static shared memory must stay within the opt-in limit
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    max_optin_smem(device) - static_cast<int>(attr.sharedSizeBytes)));
    raised[device] = true;
  }
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  KVATTN_CHECK(n > 0, "decode_attention: a CTA of ", threads, " threads and ", smem,
               " bytes of shared memory does not fit on an SM");
  cache.push_back(Entry{device, threads, smem, n});
  return n;
}

int prefix_bytes_for(int64_t num_seqs) {
  return static_cast<int>(((num_seqs + 1 + 8) * 4 + 127) / 128 * 128);
}

int split_smem(const DecodeConfig& c, int prefix_bytes) {
  return prefix_bytes + c.warps * c.stages * c.stage_bytes;
}

// The small-batch kernel's CTA of `warps` warps: stages as the stream kernel's, shared memory
// for the tiles or the warps' combine, whichever is larger.
struct SmallConfig {
  int warps = 8;
  int stages = 3;
  int smem = 0;
};
SmallConfig small_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim, int kv_bytes,
                         int warps) {
  const DecodeConfig c = decode_config(num_kv_heads, rows, head_dim, kv_bytes);
  SmallConfig s;
  s.warps = std::clamp(warps, 1, kDecodeMaxWarps);
  // The stream kernel's stages, as many as fit for this CTA's warps (a knob may ask for more).
  // (8 KB of the opt-in limit stay for the kernel's static shared memory: the query tile.)
  s.stages = std::clamp(std::min(c.stages, ((227 << 10) - 8192) / (s.warps * c.stage_bytes)), 2,
                        kDecodeMaxStages);
  const int tiles = s.warps * s.stages * c.stage_bytes;
  // The warps' states, then the merger's own piece (float32 rows and LSEs).
  const int combine = s.warps * (kDecodeRows * static_cast<int>(head_dim + 4) + 2 * kDecodeRows) * 4 +
                      kDecodeRows * static_cast<int>(head_dim + 1) * 4;
  s.smem = std::max(tiles, combine);
  return s;
}

// The one dispatch point: q dtype x cache dtype x head_dim. Supported: bf16, fp16 queries over
// caches of their own dtype or float8_e4m3 (KV = uint8_t), head_dim 64 and 128.
template <typename Fn>
void dispatch(DType dtype, DType cache_dtype, int64_t head_dim, Fn&& fn) {
  KVATTN_CHECK(dtype == DType::kBF16 || dtype == DType::kF16,
               "decode_attention: unsupported dtype on CUDA: ", dtype, " (bfloat16, float16)");
  KVATTN_CHECK(cache_dtype == dtype || cache_dtype == DType::kF8E4M3,
               "decode_attention: unsupported cache dtype on CUDA: ", cache_dtype, " (", dtype,
               " or float8_e4m3)");
  const bool bf16 = dtype == DType::kBF16;
  const bool fp8 = cache_dtype == DType::kF8E4M3;
  auto with_d = [&]<int D>() {
    if (bf16) {
      fp8 ? fn.template operator()<__nv_bfloat16, uint8_t, D>()
          : fn.template operator()<__nv_bfloat16, __nv_bfloat16, D>();
    } else {
      fp8 ? fn.template operator()<__half, uint8_t, D>() : fn.template operator()<__half, __half, D>();
    }
  };
  switch (head_dim) {
    case 64: with_d.template operator()<64>(); return;
    case 128: with_d.template operator()<128>(); return;
    default:
      KVATTN_FAIL("decode_attention: unsupported head_dim: ", head_dim,
                  " (the CUDA kernel supports 64 and 128)");
  }
}

// Small mode's chunks per (sequence, unit) and warps per CTA; chunks 0: use the stream kernel.
// Worth it only when the batch's units are few for the GPU (4+ chunks each). Warps: 8 when
// that gives 4+ chunks, else 4 (2 CTAs per SM, twice the chunks): measured on the H200
// (docs/perf/NOTES.md, round 3), 8 warps for 1-4 x 8192 (4 warps: 33 chunks of 1-2 tiles
// per warp, +25%), 4 warps for 8 x 32768 (C = 4: 4.35 TB/s vs the stream kernel's 3.99).
// cuda_tuning().decode_small_warps > 0 forces one count; decode_small_max_chunks caps C.
struct SmallChoice {
  int chunks = 0;
  int warps = 8;
};
SmallChoice small_choice(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                         int64_t head_dim, DType cache_dtype) {
  const CudaTuning& tuning = cuda_tuning();
  if (!tuning.decode_small || num_seqs <= 0 || num_seqs >= (int64_t{1} << 16)) return {};
  const int64_t units = num_kv_heads * ((rows + kDecodeRows - 1) / kDecodeRows);
  const int forced = tuning.decode_small_warps;
  for (const int warps : {forced > 0 ? forced : 8, forced > 0 ? 0 : 4}) {
    if (warps == 0) break;
    const SmallConfig sc = small_config(num_kv_heads, rows, head_dim, kv_bytes_of(cache_dtype), warps);
    int ctas = 0;
    dispatch(DType::kBF16, cache_dtype == DType::kF8E4M3 ? cache_dtype : DType::kBF16, head_dim,
             [&]<typename T, typename KV, int D>() {
               ctas = split_occupancy<T, KV, D, true, true>(device, sc.warps * 32, sc.smem);
             });
    int64_t chunks = int64_t{sm_count(device)} * ctas / (num_seqs * units);
    if (tuning.decode_small_max_chunks > 0) {
      chunks = std::min<int64_t>(chunks, tuning.decode_small_max_chunks);
    }
    if (chunks >= 4) return {static_cast<int>(std::min<int64_t>(chunks, kSmallMaxChunks)), sc.warps};
  }
  return {};
}

// A fresh tag per launch for the small kernel's LL words (never 0, the cleared tag, and never
// all ones: a zeroed or 0xFF-poisoned workspace word is never mistaken for this launch's).
uint32_t next_epoch() {
  static std::atomic<uint32_t> counter{[] {
    std::random_device rd;
    return static_cast<uint32_t>(rd());
  }()};
  for (;;) {
    const uint32_t e = counter.fetch_add(1, std::memory_order_relaxed) * 2654435761u;
    if (e != 0u && e != 0xffffffffu) return e;
  }
}

// Stream mode is possible: few enough sequences for the shared prefix sum, 32-bit tile indices.
bool stream_ok(int64_t num_seqs, int64_t capacity) {
  return num_seqs <= kDecodeMaxStreamSeqs &&
         num_seqs * ((capacity + kDecodeTileKeys - 1) / kDecodeTileKeys) < (int64_t{1} << 31);
}

template <typename T, typename KV, int D>
void launch(DecodeParams p, bool aligned, int64_t ws_bytes, int device, cudaStream_t stream) {
  constexpr int kKvBytes = static_cast<int>(sizeof(KV));
  const DType cache_dtype = kIsFp8<KV> ? DType::kF8E4M3 : DType::kBF16;
  const DecodeConfig c = decode_config(p.num_kv_heads, p.rows, D, kKvBytes);
  const int64_t B = p.num_seqs;
  if (p.num_splits > 1) {  // small mode: as many chunks as wanted and the workspace holds
    const int64_t units = static_cast<int64_t>(p.num_kv_heads) * p.row_chunks;
    const int64_t fixed = decode_small_ws_bytes(B, p.num_kv_heads, p.rows, D, 0);
    const int64_t per_chunk = decode_small_ws_bytes(B, p.num_kv_heads, p.rows, D, 1) - fixed;
    const int64_t fit = (ws_bytes - fixed) / per_chunk;
    const SmallChoice choice = small_choice(device, B, p.num_kv_heads, p.rows, D, cache_dtype);
    const int64_t chunks = std::min<int64_t>(choice.chunks, fit);
    if (chunks >= 2) {
      const SmallConfig sc = small_config(p.num_kv_heads, p.rows, D, kKvBytes, choice.warps);
      const int64_t slots = B * chunks;
      p.stages = sc.stages;
      p.parts = static_cast<int>(chunks);
      p.ws_ll = reinterpret_cast<uint64_t*>(p.ws_o);
      p.ws_ll_lse = p.ws_ll + slots * p.num_kv_heads * p.rows * (D / 2);
      p.ws_gen = reinterpret_cast<uint32_t*>(p.ws_ll_lse + slots * p.num_kv_heads * p.rows);
      p.epoch = next_epoch();
      p.probe = cuda_tuning().decode_probe;
      const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(units),
                      static_cast<unsigned>(B));
      if (aligned) {
        (void)split_occupancy<T, KV, D, true, true>(device, sc.warps * 32, sc.smem);
        decode_small_kernel<T, KV, D, true><<<grid, sc.warps * 32, sc.smem, stream>>>(p);
      } else {
        (void)split_occupancy<T, KV, D, false, true>(device, sc.warps * 32, sc.smem);
        decode_small_kernel<T, KV, D, false><<<grid, sc.warps * 32, sc.smem, stream>>>(p);
      }
      CUDA_CHECK_LAUNCH();
      return;
    }
  }
  bool stream_mode = p.num_splits > 1 && stream_ok(B, p.capacity);
  int64_t slots = 0;
  if (stream_mode) {
    slots = decode_ws_slots(ws_bytes, B, static_cast<int64_t>(p.num_heads) * p.q_len, D);
    stream_mode = slots - B + 1 >= 1;
  }
  p.heads_per_cta = c.heads_per_cta;
  p.rc_per_cta = c.rc_per_cta;
  p.head_blocks = c.head_blocks;
  p.slices = c.head_blocks * c.rc_blocks;
  p.stages = c.stages;
  p.stream = stream_mode ? 1 : 0;
  p.prefix_bytes = stream_mode ? prefix_bytes_for(B) : 0;
  const int threads = c.warps * 32;
  const int smem = split_smem(c, p.prefix_bytes);
  const int ctas = aligned ? split_occupancy<T, KV, D, true>(device, threads, smem)
                           : split_occupancy<T, KV, D, false>(device, threads, smem);
  const int64_t per_slice = std::max<int64_t>(1, int64_t{sm_count(device)} * ctas / p.slices);
  int64_t pieces_per_seq = 1;
  if (stream_mode) {
    const int64_t rows_total = static_cast<int64_t>(p.num_kv_heads) * p.rows;
    p.ws_lse = p.ws_o + slots * rows_total * D;
    p.ws_meta = reinterpret_cast<int32_t*>(p.ws_lse + slots * rows_total);
    p.parts = static_cast<int>(per_slice);
    p.part_cap = static_cast<int>(std::min<int64_t>(slots - B + 1, 1 << 30));
    const int64_t ranges = std::min<int64_t>(p.parts, p.part_cap);
    pieces_per_seq = std::min<int64_t>(ranges, (ranges + B - 1) / B + 1);
  } else {
    p.parts = static_cast<int>(std::min<int64_t>(B, per_slice));
  }
  p.merge_wpr = pieces_per_seq >= 48 ? 8 : pieces_per_seq >= 12 ? 4 : pieces_per_seq >= 4 ? 2 : 1;
  const auto grid = static_cast<unsigned>(static_cast<int64_t>(p.parts) * p.slices);
  if (aligned) {
    decode_kernel<T, KV, D, true><<<grid, threads, smem, stream>>>(p);
  } else {
    decode_kernel<T, KV, D, false><<<grid, threads, smem, stream>>>(p);
  }
  CUDA_CHECK_LAUNCH();
  if (!stream_mode || cuda_tuning().decode_debug_no_merge) return;
  const int64_t rows = B * p.q_len * p.num_heads;
  const int64_t rows_per_block = 8 / p.merge_wpr;
  merge_kernel<T, D><<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), 256, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

DecodeConfig decode_config(int64_t num_kv_heads, int64_t rows, int64_t head_dim, int kv_bytes) {
  const CudaTuning& tuning = cuda_tuning();
  DecodeConfig c;
  const int64_t rc = (rows + kDecodeRows - 1) / kDecodeRows;
  const int64_t hc_max = std::clamp(tuning.decode_heads_per_cta, 1, kDecodeMaxWarps);
  if (rc <= kDecodeMaxWarps) {
    c.rc_per_cta = static_cast<int>(rc);
    c.rc_blocks = 1;
    c.heads_per_cta = static_cast<int>(std::min<int64_t>(num_kv_heads, std::max<int64_t>(1, hc_max / rc)));
  } else {
    c.rc_per_cta = kDecodeMaxWarps;
    c.rc_blocks = static_cast<int>((rc + kDecodeMaxWarps - 1) / kDecodeMaxWarps);
    c.heads_per_cta = 1;
  }
  c.head_blocks = static_cast<int>((num_kv_heads + c.heads_per_cta - 1) / c.heads_per_cta);
  c.warps = c.heads_per_cta * c.rc_per_cta;
  c.stage_bytes = static_cast<int>(2 * kDecodeTileKeys * head_dim * kv_bytes);
  // Default: ~192 KB of stages for a CTA of 8 warps (3 for head_dim 128, 6 for 64; fp8: 6 and
  // 8), the same bytes in flight whatever the cache dtype; never more than fits next to the
  // largest prefix sum.
  const int stages = tuning.decode_stages > 0 ? tuning.decode_stages
                                              : (192 << 10) / (kDecodeMaxWarps * c.stage_bytes);
  const int fit = ((227 << 10) - prefix_bytes_for(kDecodeMaxStreamSeqs)) / (c.warps * c.stage_bytes);
  c.stages = std::clamp(std::min(stages, fit), 2, kDecodeMaxStages);
  return c;
}

int decode_parts(int device, const DecodeConfig& c, int64_t head_dim, int64_t num_seqs) {
  const int smem = split_smem(c, prefix_bytes_for(num_seqs));
  int ctas = 0;
  dispatch(DType::kBF16, DType::kBF16, head_dim, [&]<typename T, typename KV, int D>() {
    ctas = split_occupancy<T, KV, D, true>(device, c.warps * 32, smem);
  });
  return static_cast<int>(std::max<int64_t>(1, int64_t{sm_count(device)} * ctas /
                                                   (c.head_blocks * c.rc_blocks)));
}

bool decode_stream_ok(int64_t num_seqs, int64_t capacity) { return stream_ok(num_seqs, capacity); }

int decode_small_chunks(int device, int64_t num_seqs, int64_t num_kv_heads, int64_t rows,
                        int64_t head_dim) {
  return small_choice(device, num_seqs, num_kv_heads, rows, head_dim, DType::kBF16).chunks;
}

void decode_attention(const DecodeArgs& args, const AttentionShape& shape) {
  if (shape.num_seqs == 0) return;
  constexpr std::string_view fn = "decode_attention";
  // 16-byte copies need 16-byte aligned rows; other layouts take a slower register-staged path.
  const int64_t es = dtype_size(args.q.dtype);
  const int64_t kv_es = dtype_size(args.k_cache.dtype);
  const bool aligned = aligned16(args.k_cache.data) && aligned16(args.v_cache.data) &&
                       (args.k_cache.stride(0) * kv_es) % 16 == 0 &&
                       (args.v_cache.stride(0) * kv_es) % 16 == 0;
  const int64_t capacity = shape.max_blocks_per_seq * shape.block_size;
  KVATTN_CHECK(capacity < (int64_t{1} << 30) && shape.num_blocks < (int64_t{1} << 31) &&
                   shape.num_seqs < (int64_t{1} << 30),
               fn, ": sizes past the CUDA kernel's 32-bit indexing (capacity ", capacity,
               ", num_blocks ", shape.num_blocks, ")");

  DecodeParams p;
  p.q = args.q.data;
  p.out = args.out.data;
  p.lse = args.lse.defined() ? static_cast<float*>(args.lse.data) : nullptr;
  p.k_cache = args.k_cache.data;
  p.v_cache = args.v_cache.data;
  p.k_scale = args.k_scale.defined() ? args.k_scale.ptr<const float>() : nullptr;
  p.v_scale = args.v_scale.defined() ? args.v_scale.ptr<const float>() : nullptr;
  p.block_table = args.block_table.ptr<const int32_t>();
  p.cache_seqlens = args.cache_seqlens.ptr<const int32_t>();
  p.q_stride = args.q.stride(0);
  p.out_stride = args.out.stride(0);
  p.k_block_stride = args.k_cache.stride(0);
  p.v_block_stride = args.v_cache.stride(0);
  p.bt_stride = args.block_table.stride(0);
  p.lse_head_stride = p.lse != nullptr ? args.lse.stride(0) : 0;
  p.num_seqs = static_cast<int>(shape.num_seqs);
  p.num_heads = static_cast<int>(shape.num_heads);
  p.num_kv_heads = static_cast<int>(shape.num_kv_heads);
  p.group = static_cast<int>(shape.num_heads / shape.num_kv_heads);
  p.q_len = static_cast<int>(args.q_len);
  p.rows = p.group * p.q_len;
  p.row_chunks = (p.rows + kDecodeRows - 1) / kDecodeRows;
  p.block_size = static_cast<int>(shape.block_size);
  p.num_blocks = static_cast<int>(shape.num_blocks);
  p.capacity = static_cast<int>(capacity);
  p.len_hint = static_cast<int>(
      args.plan.max_seqlen_k > 0 ? std::min(args.plan.max_seqlen_k, capacity) : capacity);
  p.num_splits = args.plan.num_splits;
  p.scale_log2 = shape.scale * 1.4426950408889634f;
  p.causal = args.causal ? 1 : 0;
  p.out_aligned4 = (reinterpret_cast<uintptr_t>(args.out.data) & 3u) == 0 && p.out_stride % 2 == 0;
  p.q_aligned16 = aligned16(args.q.data) && (p.q_stride * es) % 16 == 0;
  p.kv_evict_first = cuda_tuning().decode_kv_evict_first;
  int64_t ws_bytes = 0;
  if (p.num_splits > 1) {
    const int64_t need = decode_workspace_bytes(shape.num_seqs, shape.num_heads, shape.head_dim,
                                                args.q_len, p.num_splits);
    ws_bytes = args.workspace.defined() ? args.workspace.nbytes() : 0;
    KVATTN_CHECK(args.workspace.defined() && ws_bytes >= need, fn, ": a plan of ", p.num_splits,
                 " splits needs a workspace of ", need, " bytes but got ", ws_bytes);
    KVATTN_CHECK(aligned16(args.workspace.data), fn, ": workspace must be 16-byte aligned");
    p.ws_o = static_cast<float*>(args.workspace.data);
  }

  const int device = args.q.device.index;
  DeviceGuard guard(device);
  p.fault_word = fault_word_ptr(device);
  auto stream = static_cast<cudaStream_t>(args.stream.handle);
  dispatch(args.q.dtype, args.k_cache.dtype, shape.head_dim, [&]<typename T, typename KV, int D>() {
    launch<T, KV, D>(p, aligned, ws_bytes, device, stream);
  });
}

}  // namespace kvattn::cuda
