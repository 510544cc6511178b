// Internal: the GPU model's Gemma 1 / 2 / 3 kernels (bf16 activations, float32 math), rounded
// where HF transformers' bf16 Gemma rounds:
// - Gemma's RMSNorm computes in float32 and rounds once: bf16(x * rsqrt(mean(x^2) + eps) * w)
//   with w = 1 + HF's weight added in float32 at load (Gemma2RMSNorm), held as float32 on the
//   device (GGUF files already hold 1 + w). Llama's norm (cuda_kernels.h) rounds x * rsqrt(..)
//   to bf16 before the bf16 weight multiplies it; Gemma's does not.
// - The sandwich norms: post_attention_layernorm / post_feedforward_layernorm normalize the
//   attention / MLP output, which is rounded, then added to the residual stream (rounded).
// - The embedding scale multiplies the bf16 rows by the caller's value (the CUDA model passes
//   bf16(sqrt(hidden)), HF's bf16 normalizer) and rounds.
// - GeGLU: bf16(bf16(gelu_tanh(gate)) * up), PyTorch's tanh formula in float32.
// - The final logit soft-cap: bf16(cap * tanh(l / cap)), computed in float32 and rounded once
//   (HF's bf16 model rounds the division, the tanh and the product each).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/model/cuda_launch.h"

namespace kvattn::cuda_model {

// For t < tokens: x[t] = bf16(x[t] * scale) (written back), out[t] = gemma_rmsnorm(x[t]) * w.
// The embedding scale and the first layer's input norm. w: float32 [hidden].
void gemma_scale_rmsnorm(void* x, float scale, const float* w, float eps, void* out,
                         int64_t tokens, int64_t hidden, Launch on);

// A sandwich norm, the residual add and the next norm, per row:
//   y = bf16(gemma_rmsnorm(add[row]) * w_add); s = bf16(x[row] + y); out = bf16(rmsnorm(s) * w_out)
// w_add == null (Gemma 1, no sandwich norms): y = add[row], the plain residual add of HF's bf16
// GemmaDecoderLayer, then Gemma's norm.
// rows == null: every row t < num_rows, s written back to x[t] (out may be null: x only).
// rows != null (the last layer's MLP output and the final norm of the logit rows): row =
// rows[r] for r < num_rows, out[r] written, x not written. Weights float32 [hidden].
void gemma_norm_add_rmsnorm(void* x, const void* add, const float* w_add, const float* w_out,
                            float eps, void* out, const int32_t* rows, int64_t num_rows,
                            int64_t hidden, Launch on);

// out[t, i] = bf16(bf16(gelu_tanh(gate_up[t, i])) * gate_up[t, inter + i]).
void gelu_tanh_mul(const void* gate_up, int64_t tokens, int64_t inter, void* out,
                   Launch on);

// logits[r * ld + c] = bf16(cap * tanh(logits[r * ld + c] / cap)) for r < rows, c < cols.
void softcap_logits(void* logits, int64_t ld, int64_t rows, int64_t cols, float cap,
                    Launch on);

}  // namespace kvattn::cuda_model
