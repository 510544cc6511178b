// Internal: RoPE's per-dimension inverse frequencies for a ModelConfig, with its scaling
// (linear, dynamic NTK, Llama 3, YaRN, llama.cpp's rope_freqs factors), computed in float32 the
// way transformers' modeling_rope_utils does so that logits match HF's to float32 rounding.
// Shared by the CPU and GPU models.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/engine/model_config.h"

namespace kvattn::rope {

// inv_freq[i], i < head_dim / 2: position p rotates pair i by p * inv_freq[i]. `seq_len`
// matters only for dynamic NTK scaling (HF's dynamic_rope_update): the sequence's length so
// far (its last position + 1); at or below max_position_embeddings it is the plain RoPE.
std::vector<float> inv_freq(const ModelConfig& c, int64_t seq_len = 0);

// Gemma 3's sliding layers: plain RoPE at c.rope_local_theta (no scaling, no freq factors).
// Empty when c.rope_local_theta is 0 (every layer uses inv_freq()).
std::vector<float> local_inv_freq(const ModelConfig& c);

// The multiplier of cos and sin (YaRN's attention factor; 1 for the others).
float attention_factor(const ModelConfig& c);

// True when inv_freq() depends on seq_len (dynamic NTK).
inline bool depends_on_length(const ModelConfig& c) {
  return c.rope_scaling.type == RopeScaling::Type::kDynamic;
}

}  // namespace kvattn::rope
