// Internal: RoPE scaling and the architecture extras (biases, sliding window) read from an HF
// config.json or from GGUF metadata, validated (every value comes from an untrusted file).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvattn/engine/gguf.h"
#include "kvattn/engine/model_config.h"

namespace kvattn {

// HF: transformers 4.x `rope_scaling` {"type"|"rope_type": ..., "factor": ...} or 5.x
// `rope_parameters` {"rope_type": ..., "rope_theta": ...}, with the defaults HF's
// standardize_rope_params fills in (original_max_position_embeddings = max_position_embeddings
// for llama3/yarn; a top-level original_max_position_embeddings in `top`, the whole config,
// wins). `c` must already hold max_position_embeddings. Unknown types (longrope, su, ...) throw
// naming the type.
RopeScaling rope_scaling_from_hf(const nlohmann::json& params, const nlohmann::json& top,
                                 const ModelConfig& c, const std::string& file);

// GGUF: "<arch>.rope.scaling.type" ("none", "linear", "yarn"), ".factor",
// ".original_context_length", ".attn_factor", ".yarn_beta_fast/slow". llama.cpp keeps Llama 3
// scaling as the tensor rope_freqs.weight instead (see rope_freq_factors_from_gguf).
RopeScaling rope_scaling_from_gguf(const GgufFile& g, const ModelConfig& c);

// The rope_freqs.weight tensor ([head_dim / 2] positive finite factors), or empty.
std::vector<float> rope_freq_factors_from_gguf(const GgufFile& g, const ModelConfig& c);

// Throws naming the field when a value is out of range (factor < 1, NaN, ...).
void validate_rope_scaling(const RopeScaling& s, const std::string& file);

// transformers 5's `layer_types` (an array of "full_attention" / "sliding_attention", one per
// layer): 1 for each sliding layer, 0 for each full one. Throws naming the entry.
std::vector<uint8_t> sliding_layers_from_layer_types(const nlohmann::json& lt, int64_t num_layers,
                                                     const std::string& file);

// HF sliding window: Mistral (`sliding_window`, every layer), Qwen2 (`use_sliding_window`,
// `max_window_layers`) and transformers 5's `layer_types`. Sets c.sliding_window and
// c.sliding_layers; c.num_layers must be set.
void sliding_window_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file);

}  // namespace kvattn
