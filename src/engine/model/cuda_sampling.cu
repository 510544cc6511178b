// Token sampling on the GPU: one CTA per row (see cuda_sampling.h for the semantics).
//
// Passes over the row (each a coalesced sweep of 4 bf16 per thread per iteration, the row
// staying in L2 between passes):
//   0     argmax (the greedy answer, and the max logit for the softmax) + count of non-NaN
//   top-k radix select on key = (order-preserving logit bits, ~id): 8-bit digits from the top,
//         a 256-bin count histogram per pass, stopping as soon as the chosen bin holds exactly
//         the remaining rank (usually 2-4 passes; 8 at most, when ties need the id bits)
//   top-p radix select on key = (p bits, ~id) weighted by p in 40-bit fixed point: the bin where
//         the cumulative mass from the top reaches top_p * total (stops when the bin holds one
//         token; the first digit is p's exponent, so the bins spread)
//   draw  exponential race among the survivors (Philox uniforms), argmax of p / E.
// Histogram adds are warp-aggregated (__match_any_sync): a warp adds each distinct digit
// once, so a bin every lane hits (the first digit of clustered logits) costs one atomic.
//
// Small batches (split form, sample_slices() >= 2): one CTA per row sweeps a 152k-entry
// vocabulary at one SM's pace, tens of microseconds a sweep, which a single-stream decode pays
// every token. So rows x S CTAs share the sweeps, each a slice of S contiguous parts of the
// row: launch 1 finds each slice's argmax and non-NaN count; launch 2 reduces them (every
// slice CTA reads the row's S partials) and finishes greedy rows, runs the exponential race
// on its slice for sampled rows without top-k / top-p, or leaves a row with top-k / top-p to
// slice 0, which samples it whole as above (or, on sm_90+ unless KVATTN_SAMPLE_CLUSTERS=0, to
// the row's first cluster of 8 CTAs, each sweeping an eighth per radix pass); launch 3 reduces the
// race's partial winners.
// beats() is a total order on (value, id), so the reductions give exactly the single-CTA
// answer, whatever S is.
#include "engine/model/cuda_sampling.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kvattn/engine/sampler.h"

// Thread block clusters (sm_90+) for the split form's selects; other targets never launch them.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVATTN_SAMPLE_CLUSTERS 1
#include <cooperative_groups.h>
#else
#define KVATTN_SAMPLE_CLUSTERS 0
#endif

namespace kvattn::cuda_model {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// (a, ia) beats (b, ib): NaN is below every number; equal values go to the lower id.
__device__ __forceinline__ bool beats(float a, int ia, float b, int ib) {
  const bool an = isnan(a), bn = isnan(b);
  if (an != bn) return bn;
  if (!an && a != b) return a > b;
  return ia < ib;
}

struct Best {
  float v;
  int id;
};

struct Shared {
  unsigned int cnt[256];
  unsigned long long mass[256];
  Best best[kWarps];
  int ints[kWarps];
  // radix-select state
  unsigned long long prefix, threshold, above, target;
  unsigned int rem;
  int done;
};

__device__ Best warp_best(Best x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, x.v, o);
    const int oi = __shfl_xor_sync(kFull, x.id, o);
    if (beats(ov, oi, x.v, x.id)) x = Best{ov, oi};
  }
  return x;
}

__device__ Best block_best(Best x, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x = warp_best(x);
  if (lane == 0) s.best[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < kWarps ? s.best[lane] : Best{NAN, INT_MAX};
    x = warp_best(x);
    if (lane == 0) s.best[0] = x;
  }
  __syncthreads();
  const Best r = s.best[0];
  __syncthreads();
  return r;
}

__device__ int block_sum(int v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  if (lane == 0) s.ints[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? s.ints[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    if (lane == 0) s.ints[0] = v;
  }
  __syncthreads();
  const int r = s.ints[0];
  __syncthreads();
  return r;
}

// Order-preserving bits of a float (-0 == +0; NaN is never keyed).
__device__ __forceinline__ uint32_t float_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
// Higher logit first, then lower id.
__device__ __forceinline__ uint64_t topk_key(float v, int i) {
  return (static_cast<uint64_t>(float_key(v)) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}
// Higher p first, then lower id; p >= 0, so its sign bit is shifted out and the first 8-bit
// digit is p's exponent.
__device__ __forceinline__ uint64_t topp_key(float p, int i) {
  return ((static_cast<uint64_t>(__float_as_uint(p)) << 32) |
          static_cast<uint32_t>(~static_cast<uint32_t>(i))) << 1;
}
// The host Sampler's expression: exp((logit - max) * (1 / T)) in float.
__device__ __forceinline__ float prob(float v, float m, float inv_t) { return expf((v - m) * inv_t); }
__device__ __forceinline__ unsigned long long fixed_mass(float p) {
  return __float2ull_rz(p * 1099511627776.0f);  // p * 2^40, p <= 1
}

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}

struct Row {
  const bf16* p;
  int vocab;
  bool vec;  // 8-byte loads of 4 elements
  __device__ __forceinline__ void load4(int i0, float v[4]) const {
    if (vec && i0 + 3 < vocab) {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p + i0));
      __nv_bfloat162 a, b;
      memcpy(&a, &raw.x, 4);
      memcpy(&b, &raw.y, 4);
      v[0] = __low2float(a);
      v[1] = __high2float(a);
      v[2] = __low2float(b);
      v[3] = __high2float(b);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = i0 + j < vocab ? __bfloat162float(p[i0 + j]) : NAN;
    }
  }
};

// f(group, v[4]) for every group of 4 elements in groups [g_lo, g_hi); every thread runs the
// same number of iterations (f may use warp collectives). Elements past the vocab must be
// ignored by f: a thread past g_hi is handed the group just past the vocab.
template <class F>
__device__ __forceinline__ void for_each_group_in(const Row& row, int g_lo, int g_hi, F&& f) {
  const int groups = (row.vocab + 3) >> 2;
  for (int base = g_lo; base < g_hi; base += kThreads) {
    int g = base + static_cast<int>(threadIdx.x);
    if (g >= g_hi) g = groups;
    float v[4];
    row.load4(g * 4, v);
    f(g, v);
  }
}


// Warp-collective: adds one element with digit d (-1: none) and mass m to the histogram.
template <bool kMass>
__device__ __forceinline__ void hist_add(Shared& s, int d, unsigned long long m) {
  // Past the first digit few elements still match the prefix: a warp with none skips the
  // match (a multi-cycle instruction) and the rest.
  if (__ballot_sync(kFull, d >= 0) == 0) return;
  const unsigned peers = __match_any_sync(kFull, d);
  const int lane = threadIdx.x & 31;
  const bool lead = d >= 0 && lane == __ffs(peers) - 1;
  if constexpr (!kMass) {
    if (lead) atomicAdd(&s.cnt[d], static_cast<unsigned>(__popc(peers)));
  } else {
    unsigned leaders = __ballot_sync(kFull, lead);
    if (__popc(leaders) <= 4) {  // few distinct digits: one atomic pair per digit
      while (leaders != 0) {
        const int l = __ffs(leaders) - 1;
        leaders &= leaders - 1;
        const int dl = __shfl_sync(kFull, d, l);
        unsigned long long v = d == dl ? m : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
        if (lane == l) {
          atomicAdd(&s.cnt[dl], static_cast<unsigned>(__popc(peers)));
          atomicAdd(&s.mass[dl], v);
        }
      }
    } else if (d >= 0) {  // spread digits: few collisions
      atomicAdd(&s.cnt[d], 1u);
      atomicAdd(&s.mass[d], m);
    }
  }
}

// Warp 0, after a histogram pass at `shift`: picks the bin holding the rank-th key from the top
// (count mode) or the key where the cumulative mass from the top reaches the target (mass
// mode), and narrows the prefix to it.
template <bool kMass>
__device__ void walk(Shared& s, int shift, float top_p) {
  const int lane = static_cast<int>(threadIdx.x);
  unsigned long long own_c = 0, own_m = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    own_c += s.cnt[lane * 8 + k];
    if (kMass) own_m += s.mass[lane * 8 + k];
  }
  unsigned long long suf_c = own_c, suf_m = own_m;  // inclusive sums over lanes >= this one
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long tc = __shfl_down_sync(kFull, suf_c, o);
    const unsigned long long tm = __shfl_down_sync(kFull, suf_m, o);
    if (lane + o < 32) {
      suf_c += tc;
      suf_m += tm;
    }
  }
  const unsigned long long base = s.above;
  const unsigned long long rem = s.rem;
  unsigned long long target = s.target;
  // Every lane has read the walk's state before lane 0 or the crossing lane rewrites it
  // (the warp-wide shuffles and ballots below are not barriers to compute-sanitizer).
  __syncwarp();
  if (kMass && shift == 56) {  // the first mass pass sets the target
    const unsigned long long total = __shfl_sync(kFull, suf_m, 0);
    target = static_cast<unsigned long long>(static_cast<double>(top_p) * static_cast<double>(total));
    if (target == 0) target = 1;
    if (lane == 0) s.target = target;
  }
  const unsigned long long above_c = suf_c - own_c, above_m = suf_m - own_m;
  const bool cross = kMass ? (base + above_m < target && target <= base + suf_m)
                           : (above_c < rem && rem <= suf_c);
  const unsigned who = __ballot_sync(kFull, cross);
  if (who == 0) {  // unreachable (the counts add up); keep everything rather than nothing
    if (lane == 0) {
      s.done = 1;
      s.threshold = 0;
    }
    return;
  }
  if (!cross) return;
  unsigned long long acc_c = above_c, acc_m = above_m;
  for (int b = lane * 8 + 7; b >= lane * 8; --b) {
    const unsigned long long c = s.cnt[b], m = kMass ? s.mass[b] : 0ull;
    const bool here = kMass ? (base + acc_m + m >= target) : (acc_c + c >= rem);
    if (here) {
      const unsigned long long prefix = (s.prefix << 8) | static_cast<unsigned>(b);
      s.prefix = prefix;
      if (kMass) {
        s.above = base + acc_m;
        s.done = (c == 1 || shift == 0) ? 1 : 0;
      } else {
        const unsigned long long r = rem - acc_c;
        s.rem = static_cast<unsigned>(r);
        s.done = (c == r || shift == 0) ? 1 : 0;
      }
      s.threshold = prefix << shift;
      return;
    }
    acc_c += c;
    acc_m += m;
  }
}

// Returns T such that the selected keys are exactly the included ones with key >= T.
// elem(i, v, key, mass) -> included? The CTA sweeps groups [g_lo, g_hi): the whole row when
// kParts == 1; with kParts > 1 the kParts CTAs of a thread block cluster each sweep their
// part, rank 0 sums the parts' histograms through distributed shared memory and walks, and
// every rank copies rank 0's state. The counts and masses are integers, so the threshold is
// the single CTA's whatever the parts.
template <bool kMass, int kParts, class Elem>
__device__ uint64_t radix_select(const Row& row, Shared& s, unsigned rank, float top_p, int g_lo,
                                 int g_hi, Elem elem) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.threshold = 0;
    s.above = 0;
    s.target = 0;
    s.rem = rank;
    s.done = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int t = static_cast<int>(threadIdx.x); t < 256; t += kThreads) {
      s.cnt[t] = 0;
      if (kMass) s.mass[t] = 0;
    }
    __syncthreads();
    const unsigned long long prefix = s.prefix;
    for_each_group_in(row, g_lo, g_hi, [&](int g, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = g * 4 + j;
        uint64_t key = 0;
        unsigned long long m = 0;
        bool in = i < row.vocab && elem(i, v[j], key, m);
        if (in && shift < 56 && (key >> (shift + 8)) != prefix) in = false;
        hist_add<kMass>(s, in ? static_cast<int>((key >> shift) & 255u) : -1, m);
      }
    });
    __syncthreads();
    if constexpr (kParts > 1) {
#if KVATTN_SAMPLE_CLUSTERS
      cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
      cluster.sync();  // every part's histogram is complete
      const bool lead = cluster.block_rank() == 0;
      if (lead) {
        for (int t = static_cast<int>(threadIdx.x); t < 256; t += kThreads) {
          unsigned c = s.cnt[t];
          unsigned long long m = kMass ? s.mass[t] : 0ull;
#pragma unroll
          for (int r = 1; r < kParts; ++r) {
            const Shared* o = cluster.map_shared_rank(&s, r);
            c += o->cnt[t];
            if (kMass) m += o->mass[t];
          }
          s.cnt[t] = c;
          if (kMass) s.mass[t] = m;
        }
        __syncthreads();
        if (threadIdx.x < 32) walk<kMass>(s, shift, top_p);
      }
      cluster.sync();  // rank 0's walk is visible; it reads no histogram until the next sync
      if (!lead && threadIdx.x == 0) {
        const Shared* o = cluster.map_shared_rank(&s, 0);
        s.prefix = o->prefix;
        s.threshold = o->threshold;
        s.above = o->above;
        s.target = o->target;
        s.rem = o->rem;
        s.done = o->done;
      }
      __syncthreads();
#else
      __trap();  // never launched below sm_90 (sample_rows)
#endif
    } else {
      if (threadIdx.x < 32) walk<kMass>(s, shift, top_p);
      __syncthreads();
    }
    if (s.done) break;
  }
  const uint64_t t = s.threshold;
#if KVATTN_SAMPLE_CLUSTERS
  // No rank may leave (or re-initialise its state) while another still reads rank 0's.
  if constexpr (kParts > 1) cooperative_groups::this_cluster().sync();
#endif
  __syncthreads();  // s is reused by the next select
  return t;
}

// Pass 0 over groups [g_lo, g_hi): the argmax (block-reduced) and the number of non-NaN
// logits (this thread's share; block_sum() totals it).
__device__ Best scan_best(const Row& row, int g_lo, int g_hi, Shared& s, int& valid) {
  Best best{NAN, INT_MAX};
  valid = 0;
  for_each_group_in(row, g_lo, g_hi, [&](int g, const float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = g * 4 + j;
      if (i < row.vocab) {
        if (beats(v[j], i, best.v, best.id)) best = Best{v[j], i};
        valid += isnan(v[j]) ? 0 : 1;
      }
    }
  });
  return block_best(best, s);
}

// The row's filters after pass 0 (top-k on / off, top-p on / off, and their thresholds).
struct Filters {
  bool topk = false, topp = false;
  uint64_t tk = 0, tp = 0;
};

// The exponential race over groups [g_lo, g_hi) among the survivors of f (block-reduced).
__device__ Best race(const Row& row, int g_lo, int g_hi, Shared& s, const SampleParams& P,
                     float max_logit, const Filters& f) {
  const float inv_t = P.inv_temperature;
  const uint2 key = make_uint2(static_cast<uint32_t>(P.seed), static_cast<uint32_t>(P.seed >> 32));
  const uint32_t c1 = static_cast<uint32_t>(P.step), c2 = static_cast<uint32_t>(P.stream);
  const uint32_t c3 = static_cast<uint32_t>(P.step >> 32) ^ static_cast<uint32_t>(P.stream >> 32);
  Best win{NAN, INT_MAX};
  for_each_group_in(row, g_lo, g_hi, [&](int g, const float* v) {
    float p[4];
    bool any = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = g * 4 + j;
      p[j] = -1.0f;  // not a survivor
      if (i >= row.vocab || isnan(v[j])) continue;
      if (f.topk && topk_key(v[j], i) < f.tk) continue;
      const float pj = prob(v[j], max_logit, inv_t);
      if (f.topp && topp_key(pj, i) < f.tp) continue;
      if (P.min_p > 0.0f && pj < P.min_p) continue;
      // A survivor whose best possible score is below this thread's current winner cannot
      // win: E = -log(U) >= -logf(1 - 2^-24) ~ 5.96e-8, so p / E < p * 2^25 (a factor ~2 of
      // margin over the rounding). Skipping it (and, when all four skip, the group's Philox)
      // leaves the race's winner exactly as it was.
      if (pj * 0x1p25f < win.v) continue;
      p[j] = pj;
      any = true;
    }
    if (!any) return;
    const uint4 u = philox4x32_10(make_uint4(static_cast<uint32_t>(g), c1, c2, c3), key);
    const uint32_t us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (p[j] < 0.0f) continue;
      const float uniform = (static_cast<float>(us[j] >> 9) + 0.5f) * 0x1p-23f;  // (0, 1)
      const float score = p[j] / -logf(uniform);
      if (beats(score, g * 4 + j, win.v, win.id)) win = Best{score, g * 4 + j};
    }
  });
  return block_best(win, s);
}

// A sampled row's top-k and top-p thresholds (radix selects over the row; kParts and the
// CTA's groups [g_lo, g_hi) as radix_select).
template <int kParts>
__device__ Filters select_filters(const Row& row, Shared& s, const SampleParams& P,
                                  float max_logit, int valid, int g_lo, int g_hi) {
  Filters f;
  const float inv_t = P.inv_temperature;
  f.topk = P.top_k > 0 && P.top_k < valid;
  if (f.topk) {
    f.tk = radix_select<false, kParts>(row, s, static_cast<unsigned>(P.top_k), 0.0f, g_lo, g_hi,
                               [&](int i, float v, uint64_t& key, unsigned long long&) {
                                 if (isnan(v)) return false;
                                 key = topk_key(v, i);
                                 return true;
                               });
  }
  f.topp = P.top_p < 1.0f;
  if (f.topp) {
    const bool topk = f.topk;
    const uint64_t tk = f.tk;
    f.tp = radix_select<true, kParts>(row, s, 0, P.top_p, g_lo, g_hi,
                              [&](int i, float v, uint64_t& key, unsigned long long& m) {
                                if (isnan(v) || (topk && topk_key(v, i) < tk)) return false;
                                const float p = prob(v, max_logit, inv_t);
                                m = fixed_mass(p);
                                if (m == 0) return false;  // below every boundary token
                                key = topp_key(p, i);
                                return true;
                              });
  }
  return f;
}

// Whether a sampled row needs the whole-row selects (top-k or top-p in force).
__device__ __forceinline__ bool needs_selects(const SampleParams& P, int valid) {
  return (P.top_k > 0 && P.top_k < valid) || P.top_p < 1.0f;
}

// Everything after pass 0 for one row, by one CTA: the filters, the race, the token.
__device__ void sample_whole_row(const Row& row, Shared& s, const SampleParams& P, Best best,
                                 int valid, int32_t* token) {
  const int groups = (row.vocab + 3) >> 2;
  const Filters f = select_filters<1>(row, s, P, best.v, valid, 0, groups);
  const Best win = race(row, 0, groups, s, P, best.v, f);
  if (threadIdx.x == 0) *token = win.id != INT_MAX ? win.id : best.id;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const bf16* __restrict__ logits, int64_t ld, int vocab, bool vec,
                  const SampleParams* __restrict__ params, int32_t* __restrict__ tokens) {
  pdl_enter();
  __shared__ Shared s;
  const int r = static_cast<int>(blockIdx.x);
  const SampleParams P = params[r];
  if (P.mode == kSampleSkip) return;
  const Row row{logits + static_cast<int64_t>(r) * ld, vocab, vec};

  // Pass 0: argmax and the number of non-NaN logits.
  int valid = 0;
  const Best best = scan_best(row, 0, (vocab + 3) >> 2, s, valid);
  if (P.mode != kSampleRandom || !isfinite(best.v)) {
    if (threadIdx.x == 0) tokens[r] = best.id;
    return;
  }
  valid = block_sum(valid, s);
  sample_whole_row(row, s, P, best, valid, tokens + r);
}

// ---- split form (small batches) ----

// One slice's partial: its best (value, id) and, for pass 0, its non-NaN count.
struct SlicePartial {
  float v;
  int id;
  int valid;
  int unused;
};
static_assert(sizeof(SlicePartial) == 16, "kSampleScratchBytes counts 16-byte partials");

// Slice `slice` of S: groups [lo, hi) of the row's `groups`.
__device__ __forceinline__ void slice_range(int groups, int slice, int S, int& lo, int& hi) {
  lo = static_cast<int>(static_cast<int64_t>(groups) * slice / S);
  hi = static_cast<int>(static_cast<int64_t>(groups) * (slice + 1) / S);
}

// The row's S partials reduced by the whole CTA (S <= kThreads): best and total count.
__device__ Best reduce_partials(const SlicePartial* part, int S, Shared& s, int* valid) {
  Best b{NAN, INT_MAX};
  int n = 0;
  if (static_cast<int>(threadIdx.x) < S) {
    const SlicePartial p = part[threadIdx.x];
    b = Best{p.v, p.id};
    n = p.valid;
  }
  b = block_best(b, s);
  if (valid != nullptr) *valid = block_sum(n, s);
  return b;
}

// Launch 1: grid (S, rows). Each slice's argmax and non-NaN count.
__global__ void __launch_bounds__(kThreads)
    slice_best_kernel(const bf16* __restrict__ logits, int64_t ld, int vocab, bool vec,
                      const SampleParams* __restrict__ params, SlicePartial* __restrict__ part) {
  pdl_enter();
  __shared__ Shared s;
  const int r = static_cast<int>(blockIdx.y), slice = static_cast<int>(blockIdx.x);
  const int S = static_cast<int>(gridDim.x);
  if (params[r].mode == kSampleSkip) return;
  const Row row{logits + static_cast<int64_t>(r) * ld, vocab, vec};
  int lo = 0, hi = 0;
  slice_range((vocab + 3) >> 2, slice, S, lo, hi);
  int valid = 0;
  const Best best = scan_best(row, lo, hi, s, valid);
  valid = block_sum(valid, s);
  if (threadIdx.x == 0) part[r * S + slice] = SlicePartial{best.v, best.id, valid, 0};
}

// Launch 2: grid (S, rows). Greedy rows (and rows whose max is not finite) end here (slice 0
// writes the token); otherwise each slice runs the race on its part (partial winners in
// `wins`). A row with top-k / top-p: with kCluster == 1, slice 0 samples it whole; with
// kCluster > 1 (launched in clusters of kCluster CTAs, S a multiple of it), the row's first
// cluster runs the selects and the race in kCluster parts and the other slices leave empty
// winners.
template <int kCluster>
__global__ void __launch_bounds__(kThreads)
    slice_race_kernel(const bf16* __restrict__ logits, int64_t ld, int vocab, bool vec,
                      const SampleParams* __restrict__ params, const SlicePartial* __restrict__ part,
                      SlicePartial* __restrict__ wins, int32_t* __restrict__ tokens) {
  pdl_enter();
  __shared__ Shared s;
  const int r = static_cast<int>(blockIdx.y), slice = static_cast<int>(blockIdx.x);
  const int S = static_cast<int>(gridDim.x);
  const SampleParams P = params[r];
  if (P.mode == kSampleSkip) return;
  int valid = 0;
  const Best best = reduce_partials(part + r * S, S, s, &valid);
  if (P.mode != kSampleRandom || !isfinite(best.v)) {
    if (slice == 0 && threadIdx.x == 0) tokens[r] = best.id;
    return;
  }
  const Row row{logits + static_cast<int64_t>(r) * ld, vocab, vec};
  const int groups = (vocab + 3) >> 2;
  if (needs_selects(P, valid)) {
    if constexpr (kCluster > 1) {
      if (slice >= kCluster) {
        if (threadIdx.x == 0) wins[r * S + slice] = SlicePartial{NAN, INT_MAX, 0, 0};
        return;
      }
      int lo = 0, hi = 0;
      slice_range(groups, slice, kCluster, lo, hi);
      const Filters f = select_filters<kCluster>(row, s, P, best.v, valid, lo, hi);
      const Best win = race(row, lo, hi, s, P, best.v, f);
      if (threadIdx.x == 0) wins[r * S + slice] = SlicePartial{win.v, win.id, 0, 0};
    } else if (slice == 0) {
      sample_whole_row(row, s, P, best, valid, tokens + r);
    }
    return;
  }
  int lo = 0, hi = 0;
  slice_range(groups, slice, S, lo, hi);
  const Best win = race(row, lo, hi, s, P, best.v, Filters{});
  if (threadIdx.x == 0) wins[r * S + slice] = SlicePartial{win.v, win.id, 0, 0};
}

// Launch 3: grid (rows). The race's winner of the rows launch 2 left to it (with
// selects_split, those with top-k / top-p too).
__global__ void __launch_bounds__(kThreads)
    slice_finish_kernel(const SampleParams* __restrict__ params, int S,
                        const SlicePartial* __restrict__ part, const SlicePartial* __restrict__ wins,
                        bool selects_split, int32_t* __restrict__ tokens) {
  pdl_enter();
  __shared__ Shared s;
  const int r = static_cast<int>(blockIdx.x);
  const SampleParams P = params[r];
  if (P.mode != kSampleRandom) return;
  int valid = 0;
  const Best best = reduce_partials(part + r * S, S, s, &valid);
  if (!isfinite(best.v) || (!selects_split && needs_selects(P, valid))) return;  // launch 2 wrote it
  const Best win = reduce_partials(wins + r * S, S, s, nullptr);
  if (threadIdx.x == 0) tokens[r] = win.id != INT_MAX ? win.id : best.id;
}

}  // namespace

SampleParams make_sample_params(const RowSampling& r, size_t row_index) {
  KVATTN_CHECK(std::isfinite(r.temperature), "forward_sample: rows[", row_index,
               "].temperature must be finite but is ", r.temperature);
  KVATTN_CHECK(r.top_p > 0.0f && r.top_p <= 1.0f, "forward_sample: rows[", row_index,
               "].top_p must be in (0, 1] but is ", r.top_p);
  KVATTN_CHECK(r.min_p >= 0.0f && r.min_p <= 1.0f, "forward_sample: rows[", row_index,
               "].min_p must be in [0, 1] but is ", r.min_p);
  SampleParams p;
  const bool greedy = greedy_sampling(r.temperature, r.top_k);
  p.mode = greedy ? kSampleGreedy : kSampleRandom;
  p.top_k = r.top_k;
  p.inv_temperature = greedy ? 1.0f : 1.0f / r.temperature;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.seed = r.seed;
  p.stream = r.stream;
  p.step = r.step;
  return p;
}

int sample_slices(int64_t rows, int64_t vocab) {
  const int64_t groups = (vocab + 3) / 4;
  const int64_t by_ctas = kSampleSplitCtas / std::max<int64_t>(rows, 1);
  const int64_t by_size = groups / kSampleMinSliceGroups;
  const int64_t s = std::min({by_ctas, by_size, int64_t{kSampleMaxSlices}});
  return s >= 2 ? static_cast<int>(s) : 1;
}

bool sample_select_clusters_default() {
  static const bool on = [] {
    const char* e = std::getenv("KVATTN_SAMPLE_CLUSTERS");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

namespace {

// Whether the current device runs thread block clusters (compute capability 9.0+), per device.
bool device_has_clusters() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) return false;
  int v = known[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    v = major >= 9 ? 2 : 1;
    known[dev].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

}  // namespace

void sample_rows(const void* logits, int64_t ld, int64_t rows, int64_t vocab,
                 const SampleParams* params, int32_t* tokens, void* scratch, Launch on,
                 int max_slices, int select_clusters) {
  if (rows == 0) return;
  KVATTN_CHECK(vocab > 0 && vocab < (int64_t{1} << 30) && rows < (int64_t{1} << 31) && ld >= 0,
               "sample_rows: vocab ", vocab, ", rows ", rows, " or ld ", ld, " out of range");
  const bool vec = ld % 4 == 0 && (reinterpret_cast<uintptr_t>(logits) & 7u) == 0;
  int S = std::min(sample_slices(rows, vocab), std::max(max_slices, 1));
  if (S < 2 || scratch == nullptr) {
    launch_kernel(sample_kernel, static_cast<unsigned>(rows), kThreads, 0, on,
                  static_cast<const bf16*>(logits), ld, static_cast<int>(vocab), vec, params,
                  tokens);
    return;
  }
  const bool want_clusters =
      select_clusters < 0 ? sample_select_clusters_default() : select_clusters > 0;
  const bool clusters =
      want_clusters && S >= kSampleSelectCluster && device_has_clusters();
  if (clusters) S -= S % kSampleSelectCluster;
  auto* part = static_cast<SlicePartial*>(scratch);
  SlicePartial* wins = part + rows * S;  // rows * S <= kSampleSplitCtas each
  const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(rows));
  launch_kernel(slice_best_kernel, grid, kThreads, 0, on, static_cast<const bf16*>(logits), ld,
                static_cast<int>(vocab), vec, params, part);
  if (clusters) {
    launch_kernel_clusters(slice_race_kernel<kSampleSelectCluster>, grid, kThreads, 0, on,
                           static_cast<unsigned>(kSampleSelectCluster),
                           static_cast<const bf16*>(logits), ld, static_cast<int>(vocab), vec,
                           params, static_cast<const SlicePartial*>(part), wins, tokens);
  } else {
    launch_kernel(slice_race_kernel<1>, grid, kThreads, 0, on, static_cast<const bf16*>(logits),
                  ld, static_cast<int>(vocab), vec, params,
                  static_cast<const SlicePartial*>(part), wins, tokens);
  }
  launch_kernel(slice_finish_kernel, static_cast<unsigned>(rows), kThreads, 0, on, params, S,
                static_cast<const SlicePartial*>(part), static_cast<const SlicePartial*>(wins),
                clusters, tokens);
}

std::vector<int32_t> sample_on_device(int device, std::span<const float> logits, int64_t vocab,
                                      std::span<const RowSampling> rows, int max_slices,
                                      int select_clusters) {
  const auto n = static_cast<int64_t>(rows.size());
  KVATTN_CHECK(vocab > 0 && (static_cast<int64_t>(logits.size()) == vocab ||
                             static_cast<int64_t>(logits.size()) == n * vocab),
               "sample_on_device: logits must hold one row or one per draw");
  if (n == 0) return {};
  cuda::DeviceGuard guard(device);
  std::vector<bf16> host(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) host[i] = __float2bfloat16_rn(logits[i]);
  std::vector<SampleParams> params(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) params[i] = make_sample_params(rows[i], i);
  void *d_logits = nullptr, *d_params = nullptr, *d_tokens = nullptr, *d_scratch = nullptr;
  CUDA_CHECK(cudaMalloc(&d_scratch, kSampleScratchBytes));
  CUDA_CHECK(cudaMalloc(&d_logits, host.size() * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&d_params, params.size() * sizeof(SampleParams)));
  CUDA_CHECK(cudaMalloc(&d_tokens, rows.size() * sizeof(int32_t)));
  std::vector<int32_t> out(rows.size(), -1);
  CUDA_CHECK(cudaMemcpy(d_logits, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_params, params.data(), params.size() * sizeof(SampleParams),
                        cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_tokens, out.data(), out.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  sample_rows(d_logits, static_cast<int64_t>(logits.size()) == vocab ? 0 : vocab, n, vocab,
              static_cast<const SampleParams*>(d_params), static_cast<int32_t*>(d_tokens),
              d_scratch, Launch(nullptr), max_slices, select_clusters);
  CUDA_CHECK(cudaMemcpy(out.data(), d_tokens, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  cudaFree(d_logits);
  cudaFree(d_params);
  cudaFree(d_tokens);
  cudaFree(d_scratch);
  return out;
}

}  // namespace kvattn::cuda_model
