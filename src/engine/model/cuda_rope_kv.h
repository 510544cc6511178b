// Internal: the GPU model's q/k-norm + RoPE kernel, alone or fused with the paged KV write.
// Rounding as in cuda_kernels.h (HF transformers' bf16 model): the per-head RMSNorm is
// bf16(w * bf16(x * rsqrt(mean(x^2) + eps))), RoPE uses bf16 cos/sin and rounds each product.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/model/cuda_launch.h"
#include "kvattn/core/tensor.h"

namespace kvattn::cuda_model {

// The fused qkv rows of a step: token t's row at qkv + t * ld (bf16 elements), holding
// num_heads q heads, then num_kv_heads k heads, then num_kv_heads v heads of head_dim each.
struct QkNormRope {
  void* qkv = nullptr;
  int64_t ld = 0;  // row stride, elements (even)
  int64_t tokens = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;  // head_dim even, <= 256
  // Partial rotary embeddings (Phi-4-mini, GPT-NeoX's rotary_pct): the first rotary_dim dims
  // of each q and k head rotate, pairs (i, i + rotary_dim / 2) or (2i, 2i + 1) within them;
  // the others pass through (normed, if the model norms q and k). Even; 0: head_dim.
  int64_t rotary_dim = 0;
  const void* q_norm = nullptr;  // qwen3's per-head RMSNorm weights, bf16 [head_dim]; or both
  const void* k_norm = nullptr;  // null (no q/k norm)
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [tokens], on the device
  // RoPE's frequencies: pair i at position p turns by p * inv_freq[i], float32 [rotary_dim /
  // 2] on the device (engine/model/rope.h computes them with their scaling: linear, llama3,
  // YaRN, llama.cpp's rope_freqs). Null: plain RoPE, inv_freq[i] = 1 / theta^(2i / rotary_dim)
  // computed in the kernel.
  const float* inv_freq = nullptr;
  float theta = 10000.0f;
  // cos and sin are multiplied by it before they round to bf16 (YaRN's attention factor), as
  // HF's rotary embedding does; 1 leaves them as they are.
  float attention_factor = 1.0f;
  // Dynamic NTK (HF's dynamic_rope_update), off while factor is 0: a token of a sequence whose
  // length after this step, L, exceeds max_position turns at base theta * (factor * L /
  // max_position - (factor - 1))^(rotary_dim / (rotary_dim - 2)) instead of inv_freq (rope.cpp's
  // float32 formula). L is seq_lens[t], or positions[t] + 1 when seq_lens is null (one token
  // per sequence, e.g. decode). Graph-safe: everything is read on the device.
  struct Dynamic {
    float factor = 0.0f;            // 0: off
    float factor_minus_one = 0.0f;  // float(factor - 1), computed in double as rope.cpp does
    float exponent = 0.0f;          // float(rotary_dim / (rotary_dim - 2.0))
    int64_t max_position = 0;       // max_position_embeddings
  } dynamic;
  const int32_t* seq_lens = nullptr;  // [tokens], on the device, or null
  bool interleaved = false;  // RoPE pairs (2i, 2i+1); else rotate-half pairs (i, i + d/2)
};

// In place on the q and k heads: the optional per-head RMSNorm, then RoPE at positions[t].
// Throws when dynamic.factor is set without theta or max_position, or head_dim is odd / > 256.
void qk_norm_rope(const QkNormRope& p, Launch on);

// One layer's paged caches and the step's slots, as Attention holds them (bind_cache) and as
// BatchContext::slot_mapping gives them.
struct KVWrite {
  TensorView k_cache, v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim], bfloat16 or
                                // float8_e4m3; a block's rows contiguous, any block stride
  TensorView k_scale, v_scale;  // float8_e4m3: float32 [num_kv_heads] or empty (1.0)
  TensorView slot_mapping;      // int32 [>= tokens], contiguous, on the caches' device
};

// qk_norm_rope, and in the same launch this step's K (normed and rotated, exactly as left in
// qkv) and V written into the paged caches at slot_mapping[t]: the bytes Attention's store_kv
// would write (store_kv.cu's copy for bf16, store_kv_fp8.cu's quantisation for e4m3). Slot < 0:
// a pad row, nothing written to the caches; slot >= num_blocks * block_size: skipped and
// recorded in the device fault word (kFaultSlotOutOfRange), as store_kv does. Call Attention
// with BatchContext::kv_stored set afterwards, so the layer does not store them again.
void qk_norm_rope_store_kv(const QkNormRope& p, const KVWrite& kv, Launch on);

}  // namespace kvattn::cuda_model
