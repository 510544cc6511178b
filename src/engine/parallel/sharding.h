// Internal: Megatron-style tensor-parallel sharding of a model's weights (issue 8).
//
// Rank r of N holds (HF names, [out, in] projections):
//   q_proj            rows of heads [r*H/N, (r+1)*H/N)          column-parallel
//   k_proj, v_proj    rows of KV heads [r*K/N, (r+1)*K/N)        column-parallel
//                     (their biases: the same rows)
//   o_proj            the matching input columns                 row-parallel: all-reduce after
//   gate/up_proj      rows [r*I/N, (r+1)*I/N)                    column-parallel
//   down_proj         the matching input columns                 row-parallel: all-reduce after
//   embed_tokens      vocab rows [r*Vs, (r+1)*Vs), Vs = ceil(V/N); rows past V are zero.
//                     A rank looks up only ids in its slice (zeros elsewhere): all-reduce after.
//   lm_head           the same vocab rows (a tied head shares them): each rank's logits are
//                     the slice's; gathered in rank order and cut to V.
//   norms, q/k_norm   replicated; so is o_proj's bias, which every rank adds after the
//                     all-reduce.
// The shard's config describes the rank's model: num_heads H/N, num_kv_heads K/N,
// intermediate I/N, vocab Vs; hidden, head_dim and everything else unchanged. Since every
// rank holds the same number of KV heads, one BlockManager serves all ranks' pools.
#pragma once

#include <cstdint>

#include "kvattn/engine/weights.h"

namespace kvattn {

struct TensorParallel {
  int rank = 0;
  int size = 1;
};

// Throws kvattn::Error naming the dimension when size < 1, rank is outside [0, size), or size
// does not divide num_heads, num_kv_heads or intermediate_size.
void check_tensor_parallel(const ModelConfig& config, TensorParallel tp);

// Vocab rows per rank: ceil(vocab / size).
int64_t vocab_shard_rows(int64_t vocab_size, int size);

// The rank's weights (host tensors in `full`'s dtypes: float32, or bf16/f16 kept from the
// file; copied: `full` is unchanged). With size 1 the result equals `full`.
ModelWeights shard_weights(const ModelWeights& full, TensorParallel tp);

}  // namespace kvattn
