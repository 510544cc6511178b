// BatchContext: what one step tells the Attention layer (the seed's runtime context), passed
// explicitly rather than through a global. All views live on the device of the layer's cache.
#pragma once

#include <cstdint>

#include "kvattn/core/tensor.h"
#include "kvattn/kernels/decode_attention.h"

namespace kvattn {

enum class Phase : uint8_t { kPrefill, kDecode };

struct BatchContext {
  Phase phase = Phase::kPrefill;
  TensorView slot_mapping;   // int32/int64 [num_tokens]; -1 => skip (padding)
  // The caller has already written this step's K/V into the layer's bound caches at
  // slot_mapping (a model's fused RoPE + KV-write kernel), so Attention::forward must not
  // store them again; k and v are still read when a prefill has no block_tables.
  bool kv_stored = false;
  // Prefill: packed varlen description. cu_seqlens_k counts all keys of each sequence
  // (cached prefix + new tokens).
  TensorView cu_seqlens_q;   // int32 [num_seqs + 1]
  TensorView cu_seqlens_k;   // int32 [num_seqs + 1]
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;
  // Decode: keys per sequence including this step's tokens (0 => padding row).
  TensorView context_lens;   // int32 [num_seqs]
  // Prefill: set => keys and values are read from the paged cache (prefix hit or chunked
  // prefill). Decode: always set.
  TensorView block_tables;   // int32 [num_seqs, max_blocks_per_seq], -1 padded
  // Decode on the GPU: the split-KV plan and its workspace (see plan_decode).
  DecodePlan decode_plan{0, 0};
  TensorView decode_workspace;
  Stream stream{};
};

}  // namespace kvattn
