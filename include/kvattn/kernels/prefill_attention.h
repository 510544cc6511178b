// prefill_attention: attention over packed variable-length sequences, with keys either packed
// or read from the paged KV cache through a block table (prefix-cache hits, chunked prefill).
#pragma once

#include "kvattn/core/tensor.h"

namespace kvattn {

// Layouts (DESIGN §2):
//   q, out:          [total_q, num_heads, head_dim]; last dim contiguous, head stride ==
//                    head_dim, any token stride. out has q's dtype.
//   packed k, v:     [total_k, num_kv_heads, head_dim], same rules as q.
//   paged k, v:      the caches [num_blocks, block_size, num_kv_heads, head_dim]
//                    (used when block_table is given).
//   cu_seqlens_q/k:  int32 [num_seqs + 1], non-decreasing, starting at 0. Sequence b has
//                    Lq = cu_q[b+1]-cu_q[b] queries and Lk = cu_k[b+1]-cu_k[b] keys. In the
//                    paged form, cu_seqlens_k only gives Lk; key j of sequence b lives in block
//                    block_table[b][j / block_size] at offset j % block_size.
//   block_table:     int32 [num_seqs, max_blocks_per_seq]; entries past a sequence's last
//                    block are ignored (pad with -1).
//   lse:             optional float32 [num_heads, total_q]: natural-log sum of exp of the
//                    scaled scores; -inf for a row that sees no key.
//
// Semantics: causal masking is bottom-right aligned: query i of a sequence sees key j iff
// j <= i + Lk - Lq. A row that sees no key outputs zeros. Lq = 0 writes nothing.
// Sliding window (flash-attn's window_size = (left, right), -1 = unbounded): query i also
// needs j >= i + Lk - Lq - left (left >= 0) and j <= i + Lk - Lq + right (right >= 0); causal
// sets right to 0 (a right bound given with causal is overridden, as in flash-attn). Softcap
// (> 0): each scaled score s becomes softcap * tanh(s / softcap) before the softmax (lse too).
// ALiBi (flash-attn's alibi_slopes): the score of query i and key j (after softcap) gets
// -slope[h] * |i + Lk - Lq - j| added, slope[h] the slope of query head h (of sequence b for
// [num_seqs, num_heads] slopes); the lse includes it.
// Window, softcap and ALiBi run on the CPU and on CUDA (where they, and head_dim 80/96/256,
// take the mma.sync kernel, not the Hopper one; with float8_e4m3 caches only where the
// environment sets KVATTN_FP8_EXTENDED_FORMS=1, EXPERIMENTAL: not yet run on a GPU). On CUDA the
// alibi_slopes values are not checked (a non-finite slope gives non-finite rows).
// GQA: query head h reads KV head h / (num_heads / num_kv_heads).
struct PrefillArgs {
  TensorView q;
  TensorView k;
  TensorView v;
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_k;
  TensorView block_table;  // optional: set => k and v are the paged caches
  // Upper bounds on per-sequence Lq and Lk. The GPU sizes its grid from max_seqlen_q and needs
  // it (> 0 when total_q > 0); the CPU ignores both. Rows beyond max_seqlen_q are not computed.
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;
  float softmax_scale = 0.0f;  // 0 => 1/sqrt(head_dim)
  bool causal = true;
  int64_t window_left = -1;   // -1 => unbounded (see Semantics)
  int64_t window_right = -1;  // -1 => unbounded; causal => 0
  float softcap = 0.0f;       // 0 => off
  // Optional float32 [num_heads] or [num_seqs, num_heads], last dim contiguous, finite.
  TensorView alibi_slopes;
  TensorView out;
  TensorView lse;  // optional
  // Paged form with float8_e4m3 caches (CPU only for now): dequantisation scales, as in
  // DecodeArgs. Empty => 1.0; must be empty for packed keys and other cache dtypes.
  TensorView k_scale;
  TensorView v_scale;
  Stream stream{};
};

void prefill_attention(const PrefillArgs& args);

}  // namespace kvattn
