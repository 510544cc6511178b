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
  // Decode, optional: the shared-prefix (cascade) form. cascade_prefix_len > 0 says that the
  // first cascade_prefix_len keys of the cascade_num_rows consecutive rows from
  // cascade_first_row on are the same cache blocks, listed in cascade_block_table (int32 [1,
  // >= cascade_prefix_len / block_size]). Attention::forward then attends those rows' queries
  // to the shared keys once, as one non-causal paged prefill of all of them (the shared blocks
  // are read once per step instead of once per sequence), every row's remaining keys through
  // the decode kernel with cache_leftpad = cascade_leftpad (int32 [num_seqs]:
  // cascade_prefix_len for the rows of the run, 0 for the others, which decode as usual), and
  // merges the two by their log-sum-exps (merge_attention_states). cascade_cu_seqlens is int32
  // [4] = {0, the run's query tokens, 0, cascade_prefix_len} (the prefill's cu_seqlens_q and
  // _k). Layers with a sliding window or ALiBi take the plain decode (their scores depend on
  // absolute distance). cascade_workspace: cascade_workspace_bytes() bytes on the step's device
  // (the CPU allocates when it is empty; CUDA needs it: forward never allocates there). 0 = off.
  int64_t cascade_prefix_len = 0;
  int64_t cascade_first_row = 0;
  int64_t cascade_num_rows = 0;
  TensorView cascade_block_table;
  TensorView cascade_cu_seqlens;
  TensorView cascade_leftpad;
  TensorView cascade_workspace;
  Stream stream{};
  // Decode on the GPU: launch the decode kernel with programmatic dependent launch
  // (DecodeArgs::pdl, whose promise the caller makes: no kernel still running at the launch
  // writes context_lens, block_tables or cascade_leftpad).
  bool decode_pdl = false;
};

}  // namespace kvattn
