// Internal to the GPU model's CUDA sources: the q/k norm + RoPE + KV write's typed parameters
// and device arithmetic, shared by cuda_rope_kv.cu (the standalone kernels) and cuda_gemv.cu
// (the qkv GEMV that runs them as its epilogue), so both compute the same bits: the per-head
// RMSNorm bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) summed lane + 32k with fmaf then
// warp_sum, RoPE with bf16 cos/sin and each product rounded, the cache bytes of store_kv.cu
// (bf16) or store_kv_fp8.cu (e4m3).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "engine/model/cuda_bf16_math.cuh"
#include "engine/model/cuda_rope_kv.h"
#include "kernels/cuda/fp8_quantize.cuh"

namespace kvattn::cuda_model {

inline constexpr int kRopeMaxDim = 256;

// Layouts in cuda_rope_kv.h (QkNormRope); the same values, typed.
struct RopeParams {
  __nv_bfloat16* qkv;
  int64_t ld;
  int64_t tokens;
  int num_heads, num_kv_heads, head_dim;
  const __nv_bfloat16* q_norm;
  const __nv_bfloat16* k_norm;
  float eps;
  const int32_t* positions;
  const float* inv_freq;  // [head_dim / 2] or null (plain RoPE at theta)
  float theta;
  float attention_factor;
  float dyn_factor, dyn_factor_minus_one, dyn_exponent;  // dyn_factor 0: no dynamic NTK
  int64_t dyn_max_position;
  const int32_t* seq_lens;  // dynamic NTK's lengths, or null (positions[t] + 1)
  int interleaved;
  int rotary_dim;  // the rotated dims of a head (<= head_dim, even); the rest pass through
};

// The KV write's caches: [num_blocks, block_size, num_kv_heads, head_dim] each, a block's rows
// contiguous; slot s's row at cache + (s / block_size) * block_stride + (s % block_size) *
// num_kv_heads * head_dim (elements of the cache's type).
struct CacheParams {
  void* k_cache;
  void* v_cache;
  int64_t k_block_stride, v_block_stride;  // elements
  int64_t block_size;
  int64_t num_slots;  // num_blocks * block_size
  const float* k_scale;  // e4m3: [num_kv_heads] or null (1.0)
  const float* v_scale;
  const int32_t* slots;  // [tokens]
  uint32_t* fault_word;
};

// Host: q's values typed, after rope_params' checks (kvattn::Error: even head_dim <= 256,
// both norms or neither, a finite attention factor > 0, dynamic RoPE's values, a table or
// theta > 0).
RopeParams rope_params(const QkNormRope& q);
// Host: kv's caches for q's tokens, after qk_norm_rope_store_kv's checks (kvattn::Error
// naming `who`'s argument): [num_blocks, block_size, num_kv_heads, head_dim] bf16 or e4m3 with
// contiguous rows, scales for e4m3 only, int32 slots for every token.
CacheParams cache_params(const QkNormRope& q, const KVWrite& kv, std::string_view who);

namespace {

// s[0, head_dim) = the head's row as float32, RMS-normed with weight nw when nw != null (one
// warp; s is visible to the whole warp on return).
__device__ __forceinline__ void norm_head(const bf16* v, const bf16* nw, float eps, int head_dim,
                                          float* s, int lane) {
  float ss = 0.0f;
  for (int i = lane; i < head_dim; i += 32) {
    s[i] = f(v[i]);
    ss = fmaf(s[i], s[i], ss);
  }
  if (nw != nullptr) {
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + eps);
    for (int i = lane; i < head_dim; i += 32) s[i] = r(f(nw[i]) * r(s[i] * inv));
  }
  __syncwarp();
}

// The base whose plain frequencies token t uses, or 0 when it uses the table p.inv_freq:
// theta without a table, dynamic NTK's grown base past max_position (rope.cpp's float32
// formula: growth = factor * L / max_position - (factor - 1), base = theta * growth^exponent).
__device__ __forceinline__ float rope_base(const RopeParams& p, int64_t t) {
  if (p.dyn_factor > 0.0f) {
    const int64_t len = p.seq_lens != nullptr ? p.seq_lens[t] : int64_t{p.positions[t]} + 1;
    if (len > p.dyn_max_position) {
      const float growth = p.dyn_factor * static_cast<float>(len) /
                               static_cast<float>(p.dyn_max_position) -
                           p.dyn_factor_minus_one;
      return p.theta * powf(growth, p.dyn_exponent);
    }
  }
  return p.inv_freq == nullptr ? p.theta : 0.0f;
}

// Pair i (< rotary_dim / 2) of the rotation at position pos: its cos and sin. Its frequency:
// 1 / base^(2i / rotary_dim) when base != 0, else inv_freq[i]; cos and sin are scaled by
// `scale` in float32, then rounded to bf16 (HF: (cos * attention_scaling).to(bf16)).
__device__ __forceinline__ void rope_cos_sin(int i, int rotary_dim, float pos, float base,
                                             const float* inv_freq, float scale, float& c,
                                             float& sn) {
  const float freq =
      base != 0.0f
          ? 1.0f / powf(base, static_cast<float>(2 * i) / static_cast<float>(rotary_dim))
          : __ldg(inv_freq + i);
  const float angle = pos * freq;
  c = r(cosf(angle) * scale);
  sn = r(sinf(angle) * scale);
}

// The pair (a, bb) turned by (c, sn), each product rounded as HF's bf16 model rounds it.
__device__ __forceinline__ void rotate(float a, float bb, float c, float sn, bf16& oa, bf16& ob) {
  oa = b(r(a * c) + r(-bb * sn));
  ob = b(r(bb * c) + r(a * sn));
}

// Pair i's element indices: (2i, 2i + 1) interleaved, else (i, i + rotary_dim / 2).
__device__ __forceinline__ void pair_of(int i, int rotary_dim, bool interleaved, int& ia,
                                        int& ib) {
  ia = interleaved ? 2 * i : i;
  ib = interleaved ? 2 * i + 1 : i + rotary_dim / 2;
}

// Pair i of the head in s, rotated at position pos (rope_cos_sin, rotate): elements ia, ib.
__device__ __forceinline__ void rope_pair(const float* s, int i, int rotary_dim, float pos,
                                          float base, const float* inv_freq, float scale,
                                          bool interleaved, int& ia, int& ib, bf16& oa,
                                          bf16& ob) {
  float c, sn;
  rope_cos_sin(i, rotary_dim, pos, base, inv_freq, scale, c, sn);
  pair_of(i, rotary_dim, interleaved, ia, ib);
  rotate(s[ia], s[ib], c, sn, oa, ob);
}

template <typename Cache>
__device__ __forceinline__ Cache to_cache(bf16 x, float scale) {
  if constexpr (std::is_same_v<Cache, bf16>) {
    return x;
  } else {
    return cuda::quantize_e4m3(x, scale);
  }
}

// The token kernel's per-head RMSNorm in place on a bf16 row in shared memory (one warp;
// weights W float or bf16, the same values either way): the lane + 32k fmaf sum, warp_sum,
// v[i] = bf16(w[i] * bf16(v[i] * inv)). Visible to the whole warp on return.
template <typename W>
__device__ __forceinline__ void norm_row(__nv_bfloat16* v, const W* nw, float eps, int head_dim,
                                         int lane) {
  auto wf = [](W x) {
    if constexpr (std::is_same_v<W, float>) {
      return x;
    } else {
      return f(x);
    }
  };
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRopeMaxDim / 32; ++k) {
    const int i = lane + 32 * k;
    if (i < head_dim) {
      const float x = f(v[i]);
      ss = fmaf(x, x, ss);
    }
  }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + eps);
#pragma unroll
  for (int k = 0; k < kRopeMaxDim / 32; ++k) {
    const int i = lane + 32 * k;
    if (i < head_dim) v[i] = b(wf(nw[i]) * r(f(v[i]) * inv));
  }
  __syncwarp();
}

// Eight elements of a cache row: a 16-byte copy (bf16) or eight e4m3 codes at `scale`.
// src 16-byte aligned; dst 16-byte (bf16) or 8-byte (e4m3) aligned.
template <typename Cache>
__device__ __forceinline__ void store_cache8(Cache* dst, const __nv_bfloat16* src, float scale) {
  if constexpr (std::is_same_v<Cache, __nv_bfloat16>) {
    *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src);
  } else {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo |= static_cast<uint32_t>(to_cache<Cache>(src[j], scale)) << (8 * j);
      hi |= static_cast<uint32_t>(to_cache<Cache>(src[4 + j], scale)) << (8 * j);
    }
    *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
  }
}

}  // namespace
}  // namespace kvattn::cuda_model
