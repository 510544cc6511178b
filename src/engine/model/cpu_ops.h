// Internal: the float32 elementwise building blocks of the CPU model (row-major; the GEMMs
// live in weight_matrix.h).
#pragma once

#include <cstdint>
#include <span>

#include "kvattn/engine/model_config.h"

namespace kvattn::cpu_model {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight; out may alias x. Row strides ldx/ldo.
void rms_norm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight,
              float eps, float* out, int64_t ldo);

// cos/sin of position * inv_freq[i] for each token, [tokens, head_dim / 2], each times
// `scale` (YaRN's attention factor), computed in float32 as HF does. inv_freq has rotary dims / 2
// entries (engine/model/rope.h).
void rope_tables(std::span<const int32_t> positions, std::span<const float> inv_freq,
                 float scale, float* cos_out, float* sin_out);

// Rotates the first rotary_dim dims of `heads` heads of each token in place (pairs within
// them; the others pass through; rotary_dim == head_dim for whole heads). Rows are `ld`
// elements apart; head h of token t starts at x + t * ld + h * head_dim. The tables have
// rotary_dim / 2 entries a token.
void apply_rope(float* x, int64_t ld, int64_t tokens, int64_t heads, int64_t head_dim,
                int64_t rotary_dim, ModelConfig::RopeStyle style, const float* cos_t,
                const float* sin_t);

// x[r, i] += bias[i] for r < rows, i < ld: bias spans the whole row of ld elements.
void add_bias(float* x, int64_t ld, int64_t rows, const float* bias);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], gate_up rows are 2 * inter wide.
void silu_mul(const float* gate_up, int64_t rows, int64_t inter, float* out);

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i] (GeGLU; HF's
// gelu_pytorch_tanh, in float32 as PyTorch computes it).
void gelu_tanh_mul(const float* gate_up, int64_t rows, int64_t inter, float* out);

// x = cap * tanh(x / cap) for n floats (Gemma's logit soft-capping).
void softcap(float* x, int64_t n, float cap);

}  // namespace kvattn::cpu_model
