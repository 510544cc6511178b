// Internal: the Gemma 1 / Gemma 2 / Gemma 3 parts of a ModelConfig (model_config.h's "Gemma"
// fields, the alternating sliding layers and Gemma 3's two RoPE bases), from an HF config.json or
// from GGUF metadata under llama.cpp's keys. Every value comes from an untrusted file and is
// checked.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvattn/engine/gguf.h"
#include "kvattn/engine/model_config.h"

namespace kvattn {

inline bool is_gemma(const ModelConfig& c) {
  return c.architecture == "gemma" || c.architecture == "gemma2" || c.architecture == "gemma3";
}

// Gemma 1 (GemmaForCausalLM / GGUF "gemma"): Llama's layer with GeGLU, RMSNorm (1 + w), the
// embedding scale sqrt(hidden) and tied embeddings; no sandwich norms, no soft-caps, no window,
// the softmax scale 1/sqrt(head_dim). Its activation is HF's hidden_act ("gelu", the legacy value
// of the released configs, and "gelu_pytorch_tanh" both mean GELU's tanh form in transformers 5;
// transformers 4.x read hidden_activation, null => the same); any other is refused.
//
// Gemma 2 / Gemma 3, HF (transformers 4.x and 5.x layouts): hidden_activation, query_pre_attn_scalar,
// attn/final_logit_softcapping, sliding_window with layer_types (5.x) or Gemma 2's alternation /
// Gemma 3's sliding_window_pattern (4.x), Gemma 3's rope_parameters per layer type (5.x) or
// rope_theta / rope_local_base_freq / rope_scaling (4.x; the scaling is the global layers').
// c.architecture, the sizes and max_position_embeddings must be set (config_from_hf_json: a
// Gemma's missing head_dim is 256, its missing context 8192 or Gemma 3's 131072, the HF configs'
// defaults).
void gemma_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file);

// GGUF "gemma" (llama.cpp's llama_model_gemma reads no Gemma key: no window, no soft-cap, the
// scale 1/sqrt(key_length)). GGUF "gemma2" / "gemma3" (llama.cpp): <arch>.attn_logit_softcapping,
// .final_logit_softcapping, .attention.sliding_window, .attention.sliding_window_pattern
// (a period or one bool per layer; llama.cpp's defaults 2 and 6), .attention.scale (else
// llama.cpp's rule: 1/sqrt(hidden/heads) for the 27B models, 1/sqrt(head_dim) otherwise),
// .rope.freq_base_swa (Gemma 3's local base, default 10000). The norms already hold 1 + w.
void gemma_from_gguf(const GgufFile& g, ModelConfig& c);

}  // namespace kvattn
