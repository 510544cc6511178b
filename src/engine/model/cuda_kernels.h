// Internal: the GPU model's elementwise kernels (bf16 activations, float32 math). Each one
// rounds where HF transformers rounds in a bf16 model, so greedy tokens stay comparable:
// RMSNorm is weight * bf16(x * rsqrt(mean(x^2) + eps)), the residual add rounds once, SiLU
// rounds before the multiply by up (RoPE: cuda_rope_kv.h). Each wrapper launches on
// `on.stream`, with programmatic dependent launch when `on.pdl` (cuda_launch.h's contract).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/model/cuda_launch.h"

namespace kvattn::cuda_model {

// The row kernels before issue 20's rewrite for bandwidth (one CTA of 2-byte loads per row;
// cuda_kernels.cu says what changed), kept as the reference the rewrite is bit-identical to:
// every wrapper here and in cuda_rope_kv.h launches them instead while this is on. OFF by
// default since the rewrite passed its GPU tests (session 12, H200: 4096-token TTFT 14.1 ->
// 12.1 ms); KVATTN_LEGACY_KERNELS=1 (read once) or set_legacy_kernels(true) (tests, benches;
// not while another thread launches) bring them back. Shapes the new kernels do not take use
// the legacy ones anyway.
bool legacy_kernels();
void set_legacy_kernels(bool on);

// out[t] = table[ids[t] - first_id], rows of `hidden` bf16, for ids in [first_id, first_id +
// num_ids); zeros for other ids (a tensor-parallel rank's vocab slice: the all-reduce over the
// ranks completes the row). One rank: first_id 0, num_ids the vocabulary.
void embed(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
           int64_t first_id, int64_t num_ids, void* out, Launch on);

// embed, then add_rmsnorm(x, add = null, w, eps, out, rows = null) over the same tokens, in
// one launch: x and out bit-identical to the two calls' (the first layer's input norm; not
// for a tensor-parallel rank, whose embedding rows need the all-reduce before the norm).
void embed_rmsnorm(const void* table, const int32_t* ids, int64_t tokens, int64_t hidden,
                   int64_t first_id, int64_t num_ids, const void* w, float eps, void* x,
                   void* out, Launch on);

// rows == null: for every row t < num_rows, when add != null x[t] = bf16(x[t] + add[t])
// (written back), then out[t] = rmsnorm(x[t]) * w.
// rows != null (the final norm of the logit rows): out[r] = rmsnorm(bf16(x[rows[r]] +
// add[rows[r]])) * w for r < num_rows; x is not written.
void add_rmsnorm(void* x, const void* add, const void* w, float eps, void* out,
                 const int32_t* rows, int64_t num_rows, int64_t hidden, Launch on);

// x[t, i] = bf16(x[t, i] + bias[i]) for t < rows, i < n, rows `ld` elements apart: the q/k/v
// biases after the fused QKV GEMM (Qwen2, attention_bias), the o_proj bias after o_proj (and
// its all-reduce). HF's bf16 Linear adds the bias inside the GEMM and rounds once; this rounds
// the GEMM's output, then the sum (one more bf16 rounding, within the model's error).
void add_bias(void* x, int64_t ld, int64_t rows, int64_t n, const void* bias,
              Launch on);

// q/k norm + RoPE (and its fusion with the KV cache write): cuda_rope_kv.h.

// out[t, i] = bf16(bf16(silu(gate_up[t, i])) * gate_up[t, inter + i]).
void silu_mul(const void* gate_up, int64_t tokens, int64_t inter, void* out,
              Launch on);

// Spreads a compact block table (n rows of w entries, packed) into the fixed table (rows of
// `width` entries): table[r, c] = compact[r * w + c] for r < n, c < min(w, width), with n and
// w read from the device (meta[0], meta[1]), so a captured graph serves every step. Launched
// over `rows` table rows (rows >= n are left as they are).
void scatter_block_table(const int32_t* compact, const int32_t* meta, int32_t* table,
                         int64_t width, int64_t rows, Launch on);

}  // namespace kvattn::cuda_model
