// merge_attention_states: combines two partial attention results of the same queries over
// disjoint key sets (cascade decode: a shared prefix and each sequence's own suffix), as
// FlashInfer's merge_state and vLLM's merge_attn_states do.
#pragma once

#include "kvattn/core/tensor.h"

namespace kvattn {

// Merges two partial attention outputs of the same query rows over disjoint key sets:
//   lse = log(exp(lse_a) + exp(lse_b)),  out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)
// per (token, head), float32 arithmetic. A side whose lse is -inf (it saw no key) contributes
// nothing (its out row is not used); both -inf => out row zeros and lse -inf. +inf or NaN lse:
// out row NaN and lse NaN (garbage in).
// Layouts: out_a, out_b, out: [tokens, num_heads, head_dim], same dtype (bf16, f16 or f32), last
// dim contiguous, head stride == head_dim, any token stride (out's rows must not overlap).
// head_dim 1..512. lse_a, lse_b, lse: float32 [num_heads, tokens] (the layout
// prefill_attention / decode_attention write), tokens contiguous, the head stride >= tokens (so
// a column range of a wider [num_heads, T] array may be passed).
// out may alias out_a or out_b (elementwise, same position); lse may alias lse_a or lse_b. lse
// is optional. All tensors on one device (CPU or CUDA). tokens == 0 is a no-op.
// CUDA: no allocation, no synchronisation (graph-capturable), runs on `stream`.
struct MergeStatesArgs {
  TensorView out_a;
  TensorView lse_a;
  TensorView out_b;
  TensorView lse_b;
  TensorView out;
  TensorView lse;  // optional
  Stream stream{};
};

void merge_attention_states(const MergeStatesArgs& args);

}  // namespace kvattn
