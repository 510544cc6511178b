// q/k RMSNorm (qwen3) + RoPE on the fused qkv rows, alone or fused with the paged KV write.
//
// One CTA per token (issue 20), up to 8 warps over its heads (32 under 256 tokens): every
// 16-byte piece of the token's q and k heads (and v heads when storing) goes to shared memory
// by cp.async, all in flight at once, while the CTA computes cos and sin of each RoPE pair
// once for the token (not once per head: 24x fewer cosf/sinf for Qwen3-0.6B). Then a warp per
// head norms it in shared memory (when the model has q/k norms) and rotates its pairs there;
// last the CTA writes q and k back to qkv, and, fused, the token's K and V rows (contiguous:
// all kv heads of a slot) into the paged caches, 16 bytes a store: a byte copy for a bf16
// cache, or quantize_e4m3 (store_kv_fp8.cu's function) with the kv head's scale for an e4m3 cache.
//
// Why: the kernel before (legacy_qk_norm_rope_kernel, kept: legacy_kernels()) ran a warp per
// (token, head) on 2-byte loads, 256 bytes in flight a warp, and computed cosf and sinf for
// every head; at a 4,096-token prefill it moved its 74 MB at well under half the copy
// ceiling (docs/notes/engine-other-kernels.md).
// Bytes per token and layer (Qwen3-0.6B, 16 q + 8 kv heads of 128, bf16 cache): 8 KiB read
// (q, k, v) + 10 KiB written (q and k back to qkv, K and V to the cache).
//
// Frequencies: the model uploads rope.h's float32 inv_freq table (the CPU model's values, with
// linear / llama3 / YaRN scaling and llama.cpp's rope_freqs factors already in them) and YaRN's
// cos/sin multiplier; dynamic NTK, whose base depends on the sequence's length, grows the base
// per token here from that length (read on the device, so the decode graphs replay it).
//
// Exactness: every form runs rope_cos_sin and rotate, and the norm as norm_head does it (lane
// + 32k, an explicit fmaf, what nvcc contracts `ss += x * x` to anyway, then warp_sum), so
// q and k are bit-identical between the forms, the legacy kernel included, and the cache
// bytes equal store_kv's after qk_norm_rope. The token form needs head_dim and the row stride
// multiples of 8, 16-byte aligned qkv and caches, and its row within 48 KiB of shared memory;
// other shapes take the legacy kernel. Slots follow store_kv.cu: < 0 pad rows (qkv is still
// rotated; nothing goes to the caches), >= num_slots skipped and recorded in the fault word.
// No allocation and no sync: graph-safe.
#include "engine/model/cuda_rope_kv.h"

#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "engine/model/cuda_bf16_math.cuh"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_rope_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/ptx.cuh"

namespace kvattn::cuda_model {
namespace {

// Cache: void (qk_norm_rope alone), bf16, or uint8_t (e4m3 codes).
// The legacy kernel (before issue 20; legacy_kernels()): one warp per (token, head).
template <int kMaxDim, typename Cache>
__global__ void __launch_bounds__(128)
    legacy_qk_norm_rope_kernel(const __grid_constant__ RopeParams p, const __grid_constant__ CacheParams c) {
  pdl_enter();
  constexpr bool kStore = !std::is_void_v<Cache>;
  using Dst = std::conditional_t<kStore, Cache, uint8_t>;  // a type for the unused pointers
  __shared__ float buf[4][kMaxDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * 4 + warp;
  const int heads = p.num_heads + p.num_kv_heads;
  if (item >= p.tokens * heads) return;
  const int64_t t = item / heads;
  const int h = static_cast<int>(item % heads);
  const int D = p.head_dim;
  bf16* v = p.qkv + t * p.ld + static_cast<int64_t>(h) * D;
  const bool is_k = h >= p.num_heads;

  // The cache rows of this (token, kv head): null for q heads, pad rows and faults.
  Dst* kd = nullptr;
  Dst* vd = nullptr;
  float ks = 1.0f, vs = 1.0f;
  if constexpr (kStore) {
    if (is_k) {
      const int kvh = h - p.num_heads;
      const int64_t slot = c.slots[t];
      if (slot >= c.num_slots) {
        if (kvh == 0 && lane == 0) cuda::record_fault(c.fault_word, kFaultSlotOutOfRange);
      } else if (slot >= 0) {
        const int64_t block = slot / c.block_size;
        const int64_t row = (slot - block * c.block_size) * p.num_kv_heads * D +
                            static_cast<int64_t>(kvh) * D;
        kd = static_cast<Dst*>(c.k_cache) + block * c.k_block_stride + row;
        vd = static_cast<Dst*>(c.v_cache) + block * c.v_block_stride + row;
        if constexpr (!std::is_same_v<Cache, bf16>) {
          if (c.k_scale != nullptr) ks = __ldg(c.k_scale + kvh);
          if (c.v_scale != nullptr) vs = __ldg(c.v_scale + kvh);
        }
      }
    }
  }

  float* s = buf[warp];
  norm_head(v, is_k ? p.k_norm : p.q_norm, p.eps, D, s, lane);
  const float pos = static_cast<float>(p.positions[t]);
  const float base = rope_base(p, t);
  const int R = p.rotary_dim;
  for (int i = lane; i < R / 2; i += 32) {
    int ia, ib;
    bf16 oa, ob;
    rope_pair(s, i, R, pos, base, p.inv_freq, p.attention_factor, p.interleaved != 0, ia, ib,
              oa, ob);
    v[ia] = oa;
    v[ib] = ob;
    if constexpr (kStore) {
      if (kd != nullptr) {
        kd[ia] = to_cache<Cache>(oa, ks);
        kd[ib] = to_cache<Cache>(ob, ks);
      }
    }
  }
  // Partial rotary: the dims past R pass through, normed (s holds bf16 values: b() is exact).
  for (int i = R + lane; i < D; i += 32) {
    const bf16 x = b(s[i]);
    v[i] = x;
    if constexpr (kStore) {
      if (kd != nullptr) kd[i] = to_cache<Cache>(x, ks);
    }
  }
  if constexpr (kStore) {
    if (vd == nullptr) return;
    // V head kvh of the token, two elements a lane-step (D even, 4-byte aligned: host checks).
    const auto* src = reinterpret_cast<const __nv_bfloat162*>(
        p.qkv + t * p.ld + static_cast<int64_t>(heads + (h - p.num_heads)) * D);
    for (int w = lane; w < D / 2; w += 32) {
      const __nv_bfloat162 x = src[w];
      if constexpr (std::is_same_v<Cache, bf16>) {
        reinterpret_cast<__nv_bfloat162*>(vd)[w] = x;
      } else {
        reinterpret_cast<uint16_t*>(vd)[w] = static_cast<uint16_t>(
            to_cache<Cache>(x.x, vs) | (static_cast<uint32_t>(to_cache<Cache>(x.y, vs)) << 8));
      }
    }
  }
}

constexpr int kMaxDim = kRopeMaxDim;

// One CTA per token, warps over its heads (issue 20's form; cuda_rope_kv.cu's opening comment).
// Shared memory: the token's q and k heads (and v heads when storing) as bf16, then cos and
// sin of each pair and the q and k norm weights as float32: row_elems * 2 bytes (a multiple
// of 16), then (D / 2 + D / 2 + D + D) * 4 (R / 2 pairs used of D / 2). Partial rotary: the
// dims past R are normed and left as they are.
template <typename Cache>
__global__ void __launch_bounds__(1024)
    qk_norm_rope_token_kernel(const __grid_constant__ RopeParams p,
                              const __grid_constant__ CacheParams c) {
  constexpr bool kStore = !std::is_void_v<Cache>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = p.head_dim, heads = p.num_heads + p.num_kv_heads;
  const int qk_elems = heads * D, kv_elems = p.num_kv_heads * D;
  const int row_elems = qk_elems + (kStore ? kv_elems : 0);
  bf16* row = reinterpret_cast<bf16*>(smem);
  float* cs = reinterpret_cast<float*>(smem + 2 * row_elems);
  float* sn = cs + D / 2;
  float* qw = sn + D / 2;  // the q/k norm weights as float32, when the model has them
  float* kw = qw + D;
  const int64_t t = blockIdx.x;
  bf16* qkv = p.qkv + t * p.ld;
  // The norm weights before the grid-dependency wait (weights: no kernel writes them), so
  // their DRAM round trip overlaps the previous kernel (the qkv projection) instead of the
  // row's load below.
  if (p.q_norm != nullptr) {  // both or neither (rope_params)
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
      qw[i] = f(p.q_norm[i]);
      kw[i] = f(p.k_norm[i]);
    }
  }
  pdl_enter();

  // Every 16-byte piece of the row in flight at once; cos and sin meanwhile, once per token.
  for (int v = threadIdx.x; v < row_elems / 8; v += blockDim.x) {
    cuda::ptx::cp_async_16(cuda::ptx::smem_addr(row + 8 * v), qkv + 8 * v, true);
  }
  cuda::ptx::cp_async_commit();
  // The token's cache slot with the row and its position, not after the rotation: its load
  // then overlaps theirs instead of delaying the stores at the end.
  const int64_t slot = kStore ? int64_t{c.slots[t]} : 0;
  const float pos = static_cast<float>(p.positions[t]);
  const float base = rope_base(p, t);
  const int R = p.rotary_dim;
  for (int i = threadIdx.x; i < R / 2; i += blockDim.x) {
    rope_cos_sin(i, R, pos, base, p.inv_freq, p.attention_factor, cs[i], sn[i]);
  }
  cuda::ptx::cp_async_wait<0>();
  __syncthreads();

  // A warp a head: norm_head's arithmetic in norm_head's order (lane + 32k, fmaf, warp_sum),
  // the normed values kept as bf16 (they are rounded to bf16 anyway), then the rotation.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const bool interleaved = p.interleaved != 0;
  for (int h = warp; h < heads; h += warps) {
    bf16* v = row + h * D;
    const bool is_q = h < p.num_heads;
    if (p.q_norm != nullptr) norm_row(v, is_q ? qw : kw, p.eps, D, lane);  // both or neither
    for (int i = lane; i < R / 2; i += 32) {
      int ia, ib;
      pair_of(i, R, interleaved, ia, ib);
      rotate(f(v[ia]), f(v[ib]), cs[i], sn[i], v[ia], v[ib]);
    }
  }
  __syncthreads();

  // q and k back to qkv; K and V into the token's cache rows (one contiguous row of
  // num_kv_heads * D elements each).
  for (int v = threadIdx.x; v < qk_elems / 8; v += blockDim.x) {
    *reinterpret_cast<int4*>(qkv + 8 * v) = *reinterpret_cast<const int4*>(row + 8 * v);
  }
  if constexpr (kStore) {
    if (slot >= c.num_slots) {
      if (threadIdx.x == 0) cuda::record_fault(c.fault_word, kFaultSlotOutOfRange);
      return;
    }
    if (slot < 0) return;
    const int64_t block = slot / c.block_size;
    const int64_t at = (slot - block * c.block_size) * kv_elems;
    Cache* kd = static_cast<Cache*>(c.k_cache) + block * c.k_block_stride + at;
    Cache* vd = static_cast<Cache*>(c.v_cache) + block * c.v_block_stride + at;
    const int kv_vecs = kv_elems / 8;
    for (int v = threadIdx.x; v < 2 * kv_vecs; v += blockDim.x) {
      const bool is_v = v >= kv_vecs;
      const int e = 8 * (is_v ? v - kv_vecs : v);
      const bf16* src = row + (is_v ? qk_elems : p.num_heads * D) + e;
      Cache* dst = (is_v ? vd : kd) + e;
      const float* scales = is_v ? c.v_scale : c.k_scale;
      store_cache8(dst, src, scales != nullptr ? __ldg(scales + e / D) : 1.0f);
    }
  }
}

constexpr int kTokenMaxSmem = 48 * 1024;  // the default dynamic shared memory limit

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The token kernel's shared memory for p, or 0 when the legacy kernel must run: head_dim and
// the row stride multiples of 8, qkv 16-byte aligned, the caches 16-byte aligned with block
// strides of whole 16-byte pieces, and the row within kTokenMaxSmem.
template <typename Cache>
size_t token_smem(const RopeParams& p, const CacheParams& c) {
  if (legacy_kernels() || p.head_dim % 8 != 0 || p.ld % 8 != 0 || !aligned16(p.qkv)) return 0;
  constexpr bool kStore = !std::is_void_v<Cache>;
  if constexpr (kStore) {
    constexpr int64_t kPerPiece = 16 / sizeof(Cache);
    if (!aligned16(c.k_cache) || !aligned16(c.v_cache) || c.k_block_stride % kPerPiece != 0 ||
        c.v_block_stride % kPerPiece != 0) {
      return 0;
    }
  }
  const int64_t row = (p.num_heads + p.num_kv_heads * (kStore ? 2 : 1)) * p.head_dim;
  const size_t bytes = static_cast<size_t>(2 * row + 12 * p.head_dim);
  return bytes <= kTokenMaxSmem ? bytes : 0;
}

template <typename Cache>
void launch(const RopeParams& p, const CacheParams& c, Launch on) {
  const int64_t items = p.tokens * (p.num_heads + p.num_kv_heads);
  if (items == 0) return;
  if (const size_t smem = token_smem<Cache>(p, c); smem > 0) {
    KVATTN_CHECK(p.tokens <= 0x7fffffff, "cuda model: ", p.tokens, " tokens exceed one launch");
    // The heads spread evenly over up to 8 warps (24 heads: 8 warps of 3; 8 such CTAs fit an
    // SM, 64 KB of loads in flight), or up to 32 (a head a warp) when the tokens do not fill
    // the GPU anyway (decode): less latency per CTA.
    const int heads = p.num_heads + p.num_kv_heads;
    const int max_warps = p.tokens < 256 ? 32 : 8;
    const int per_warp = (heads + max_warps - 1) / max_warps;
    const int warps = (heads + per_warp - 1) / per_warp;
    launch_kernel(qk_norm_rope_token_kernel<Cache>, static_cast<unsigned>(p.tokens), 32 * warps,
                  smem, on, p, c);
    return;
  }
  const int64_t blocks = (items + 3) / 4;
  KVATTN_CHECK(blocks <= 0x7fffffff, "cuda model: ", p.tokens, " tokens exceed one launch");
  launch_kernel(legacy_qk_norm_rope_kernel<kMaxDim, Cache>, static_cast<unsigned>(blocks), 128,
                0, on, p, c);
}

bool aligned4(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; }

}  // namespace

void qk_norm_rope(const QkNormRope& q, Launch on) {
  launch<void>(rope_params(q), CacheParams{}, on);
}

RopeParams rope_params(const QkNormRope& q) {
  KVATTN_CHECK(q.head_dim > 0 && q.head_dim <= kMaxDim && q.head_dim % 2 == 0,
               "cuda model: head_dim must be even and <= ", kMaxDim, " but is ", q.head_dim);
  KVATTN_CHECK((q.q_norm == nullptr) == (q.k_norm == nullptr),
               "cuda model: q_norm and k_norm must be given together");
  KVATTN_CHECK(std::isfinite(q.attention_factor) && q.attention_factor > 0.0f,
               "cuda model: the RoPE attention factor must be finite and > 0 but is ",
               q.attention_factor);
  const auto& d = q.dynamic;
  KVATTN_CHECK(d.factor == 0.0f || (d.factor > 0.0f && d.max_position > 0 && q.theta > 0.0f &&
                                    d.exponent > 0.0f),
               "cuda model: dynamic RoPE needs factor > 0, max_position > 0, theta > 0 and an ",
               "exponent > 0 but has factor ", d.factor, ", max_position ", d.max_position,
               ", theta ", q.theta, ", exponent ", d.exponent);
  KVATTN_CHECK(q.inv_freq != nullptr || q.theta > 0.0f,
               "cuda model: RoPE needs an inv_freq table or theta > 0 but theta is ", q.theta);
  const int64_t rotary = q.rotary_dim == 0 ? q.head_dim : q.rotary_dim;
  KVATTN_CHECK(rotary > 0 && rotary <= q.head_dim && rotary % 2 == 0,
               "cuda model: rotary_dim must be even and in (0, head_dim = ", q.head_dim,
               "] (0: head_dim) but is ", q.rotary_dim);
  return RopeParams{static_cast<bf16*>(q.qkv), q.ld, q.tokens, static_cast<int>(q.num_heads),
                    static_cast<int>(q.num_kv_heads), static_cast<int>(q.head_dim),
                    static_cast<const bf16*>(q.q_norm), static_cast<const bf16*>(q.k_norm),
                    q.eps, q.positions, q.inv_freq, q.theta, q.attention_factor, d.factor,
                    d.factor_minus_one, d.exponent, d.max_position, q.seq_lens,
                    q.interleaved ? 1 : 0, static_cast<int>(rotary)};
}

CacheParams cache_params(const QkNormRope& q, const KVWrite& kv, std::string_view kFn) {
  const TensorView& kc = kv.k_cache;
  const TensorView& vc = kv.v_cache;
  const int64_t nkv = q.num_kv_heads, D = q.head_dim;
  KVATTN_CHECK(kc.defined() && kc.ndim == 4 && kc.size(2) == nkv && kc.size(3) == D, kFn,
               ": k_cache must be [num_blocks, block_size, ", nkv, ", ", D, "] but is ",
               kc.shape_str());
  KVATTN_CHECK(vc.defined() && vc.ndim == 4 && vc.shape == kc.shape && vc.dtype == kc.dtype,
               kFn, ": v_cache ", vc.shape_str(), " ", vc.dtype, " must equal k_cache ",
               kc.shape_str(), " ", kc.dtype);
  for (const TensorView* t : {&kc, &vc}) {
    KVATTN_CHECK(t->stride(3) == 1 && t->stride(2) == D && t->stride(1) == nkv * D &&
                     t->stride(0) % 2 == 0 && aligned4(t->data),
                 kFn, ": a cache's block must hold contiguous rows, 4-byte aligned, with an ",
                 "even block stride, but its strides are [", t->stride(0), ", ", t->stride(1),
                 ", ", t->stride(2), ", ", t->stride(3), "]");
  }
  KVATTN_CHECK(kc.dtype == DType::kBF16 || kc.dtype == DType::kF8E4M3, kFn,
               ": the caches must be bfloat16 or float8_e4m3 but are ", kc.dtype);
  KVATTN_CHECK(kc.dtype == DType::kF8E4M3 || (!kv.k_scale.defined() && !kv.v_scale.defined()),
               kFn, ": k_scale/v_scale apply to float8_e4m3 caches only");
  for (const TensorView* s : {&kv.k_scale, &kv.v_scale}) {
    KVATTN_CHECK(!s->defined() || (s->dtype == DType::kF32 && s->numel() == nkv &&
                                   s->is_contiguous()),
                 kFn, ": k_scale/v_scale must be contiguous float32 [", nkv, "] but one is ",
                 s->dtype, " ", s->shape_str());
  }
  const TensorView& sm = kv.slot_mapping;
  KVATTN_CHECK(sm.defined() && sm.dtype == DType::kI32 && sm.ndim == 1 &&
                   sm.size(0) >= q.tokens && (sm.stride(0) == 1 || sm.size(0) <= 1),
               kFn, ": slot_mapping must be contiguous int32 [>= ", q.tokens, "] but is ",
               sm.dtype, " ", sm.shape_str());
  KVATTN_CHECK(aligned4(q.qkv) && q.ld % 2 == 0, kFn,
               ": qkv must be 4-byte aligned with an even row stride but its stride is ", q.ld);

  CacheParams c{};
  c.k_cache = kc.data;
  c.v_cache = vc.data;
  c.k_block_stride = kc.stride(0);
  c.v_block_stride = vc.stride(0);
  c.block_size = kc.size(1);
  c.num_slots = kc.size(0) * kc.size(1);
  c.k_scale = kv.k_scale.defined() ? kv.k_scale.ptr<const float>() : nullptr;
  c.v_scale = kv.v_scale.defined() ? kv.v_scale.ptr<const float>() : nullptr;
  c.slots = sm.ptr<const int32_t>();
  c.fault_word = cuda::fault_word_ptr(kc.device.index);
  return c;
}

void qk_norm_rope_store_kv(const QkNormRope& q, const KVWrite& kv, Launch on) {
  const RopeParams p = rope_params(q);
  const CacheParams c = cache_params(q, kv, "qk_norm_rope_store_kv");
  if (kv.k_cache.dtype == DType::kBF16) {
    launch<bf16>(p, c, on);
  } else {
    launch<uint8_t>(p, c, on);
  }
}

}  // namespace kvattn::cuda_model
