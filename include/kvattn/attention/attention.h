// Attention: the C++ form of the seed's EfficientAttentionLayer. Bound to one layer's paged
// K/V cache; each forward writes the step's new K/V into the cache, then runs prefill
// (packed or paged) or decode according to the BatchContext.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/cache/batch_context.h"
#include "kvattn/core/tensor.h"

namespace kvattn {

// Per-layer masking, so a model can alternate local and global layers (Gemma 2/3, Mistral):
// window_left >= 0 lets each query see itself and the window_left keys before it (flash-attn's
// window_size = (window_left, 0) under the layer's causal mask); -1 = global. softcap > 0 caps
// each scaled score as softcap * tanh(s / softcap) before the softmax (Gemma 2); 0 = off.
// alibi_slopes (empty = none, else one finite slope per query head): ALiBi (BLOOM, MPT), the
// bias -slope[h] * |i + Lk - Lq - j| added to each score (flash-attn's alibi_slopes).
// CPU and CUDA; on CUDA a paged prefill over a float8_e4m3 cache refuses them (the kernels
// throw, naming them).
struct AttentionMask {
  int64_t window_left = -1;
  float softcap = 0.0f;
  std::vector<float> alibi_slopes = {};
};

// Bytes of BatchContext::cascade_workspace for a decode step of `tokens` query rows: the
// shared prefix's partial output (q's dtype) and the two log-sum-exps (float32), 16-byte
// aligned parts; and, for a float8_e4m3 cache on the GPU (fp8_prefix_keys = the prefix
// length, num_kv_heads > 0), the prefix's K and V dequantized to q's dtype, which the shared
// pass reads instead of the pages (the GPU's fast prefill kernels read 16-bit K/V only).
int64_t cascade_workspace_bytes(int64_t tokens, int64_t num_heads, int64_t head_dim, DType dtype,
                                int64_t fp8_prefix_keys = 0, int64_t num_kv_heads = 0);

class Attention {
 public:
  // scale <= 0 => 1/sqrt(head_dim). num_heads must be a multiple of num_kv_heads.
  Attention(int64_t num_heads, int64_t head_dim, float scale, int64_t num_kv_heads);
  // With a sliding window and/or softcap (window_left >= -1, softcap finite and >= 0).
  Attention(int64_t num_heads, int64_t head_dim, float scale, int64_t num_kv_heads,
            AttentionMask mask);

  // Binds this layer's caches, [num_blocks, block_size, num_kv_heads, head_dim]. Until a
  // cache is bound (or when an empty view is bound, e.g. during warm-up before the pool
  // exists) forward skips the store and prefill runs over the packed k/v.
  void bind_cache(const TensorView& k_cache, const TensorView& v_cache);
  // A float8_e4m3 cache with its static dequantisation scales, float32 [num_kv_heads] each
  // (empty => 1.0; store_kv.h has the format), on the cache's device. The views must outlive
  // the binding. On CUDA q/k/v must be bfloat16 or float16 (the kernels' rule).
  void bind_cache(const TensorView& k_cache, const TensorView& v_cache,
                  const TensorView& k_scale, const TensorView& v_scale);
  bool has_cache() const { return k_cache_.defined() && k_cache_.numel() > 0; }

  // q: [tokens, num_heads * head_dim] or [tokens, num_heads, head_dim]; k, v likewise with
  // num_kv_heads. Last dim contiguous; any token stride. out: [tokens, num_heads * head_dim].
  // Stores k and v into the bound caches at ctx.slot_mapping first, unless ctx.kv_stored says
  // the caller already has (then k and v are only read by a prefill without block_tables).
  void forward(const TensorView& q, const TensorView& k, const TensorView& v,
               const BatchContext& ctx, const TensorView& out) const;
  Tensor forward(const TensorView& q, const TensorView& k, const TensorView& v,
                 const BatchContext& ctx) const;

  int64_t num_heads() const { return num_heads_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  float scale() const { return scale_; }
  const AttentionMask& mask() const { return mask_; }

 private:
  // Decode through the shared prefix (BatchContext::cascade_*): prefill + decode + merge.
  void forward_cascade(const TensorView& q, const BatchContext& ctx, const DecodeArgs& decode,
                       const TensorView& out) const;

  int64_t num_heads_;
  int64_t head_dim_;
  float scale_;
  int64_t num_kv_heads_;
  AttentionMask mask_;
  Tensor alibi_;  // mask_.alibi_slopes as float32 [num_heads] (CPU), or empty
  TensorView k_cache_;
  TensorView v_cache_;
  TensorView k_scale_;  // float8_e4m3 caches only
  TensorView v_scale_;
};

}  // namespace kvattn
