// ModelConfig: the shape of a Llama-family decoder (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3, Gemma 1/2/3,
// Phi-3), read
// from GGUF metadata or from an HF config.json (see weights.h). Everything the forward pass needs
// to interpret the weights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvattn {

// How RoPE's inverse frequencies are stretched for long contexts (HF's rope_scaling /
// rope_parameters, llama.cpp's rope.scaling.* keys). engine/model/rope.h turns it into the
// per-dimension inverse frequencies and the cos/sin multiplier.
struct RopeScaling {
  enum class Type : uint8_t { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;            // linear, dynamic, llama3, yarn, longrope
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope (the pretraining context)
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  bool truncate = true;                          // yarn: integer correction range
  double attention_factor = 1.0;  // yarn, longrope: cos/sin multiplier (resolved at load)
  // longrope (Phi-3 / Phi-3.5, HF "longrope" or "su"; llama.cpp's rope_factors_{short,long}
  // tensors): inv_freq[i] = 1 / (factor[i] * base^(2i / head_dim)), [head_dim / 2] each.
  // Which list applies is fixed for the whole engine, not per sequence (vLLM's and
  // llama.cpp's rule): the long one when the context a sequence may use exceeds
  // original_max_position_embeddings (LLMEngine sets use_long_factors from its ctx_size), so
  // every key in a cache was rotated with the same table. HF switches per forward pass by the
  // current length instead; the two agree whenever a sequence stays on one side of the
  // original context (the default context of such a model is that original length).
  std::vector<float> short_factor, long_factor;
  bool use_long_factors = false;
};
std::string_view rope_scaling_name(RopeScaling::Type t);  // "none" | "linear" | ...

struct ModelConfig {
  // "llama" | "mistral" | "qwen2" | "qwen3" | "gemma" | "gemma2" | "gemma3" | "phi3"
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  // Which pairs of a head's dimensions RoPE rotates together:
  //   kRotateHalf:  (i, i + head_dim/2)  -- HF checkpoints, Qwen (NeoX style);
  //   kInterleaved: (2i, 2i + 1)         -- llama-architecture GGUF files, whose Q/K rows the
  //                                         converter permuted; the loader keeps GGUF's row order.
  enum class RopeStyle { kRotateHalf, kInterleaved } rope_style = RopeStyle::kRotateHalf;
  // Partial rotary embeddings (Phi-4-mini: partial_rotary_factor 0.75; GGUF
  // rope.dimension_count < head_dim): only a head's first rotary_dim dimensions rotate, paired
  // within them ((i, i + rotary_dim / 2) or (2i, 2i + 1)); the rest pass through. 0 => all.
  int64_t rotary_dim = 0;
  int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool qk_norm = false;  // Qwen3: per-head RMSNorm on q and k before RoPE
  RopeScaling rope_scaling;
  // llama.cpp's form of Llama 3 scaling (GGUF tensor rope_freqs.weight, [head_dim / 2]):
  // inv_freq[i] is divided by rope_freq_factors[i]. Empty => none. Exclusive with rope_scaling.
  std::vector<float> rope_freq_factors;
  bool qkv_bias = false;  // q/k/v projections carry biases (Qwen2; Llama attention_bias)
  bool o_bias = false;    // o_proj carries a bias (Llama attention_bias)
  // Sliding-window attention (Mistral, Qwen2 use_sliding_window): a query sees itself and the
  // sliding_window - 1 keys before it (HF's mask kv > q - sliding_window; flash-attn's
  // window_left = sliding_window - 1). 0 => no window. Layers whose sliding_layers entry is 0
  // attend globally; an empty sliding_layers means every layer uses the window.
  int64_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;

  // flash-attn's window_left for `layer`: sliding_window - 1, or -1 (unbounded).
  int64_t window_left(int64_t layer) const {
    const bool sliding = sliding_window > 0 &&
                         (sliding_layers.empty() ||
                          (layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
                           sliding_layers[static_cast<size_t>(layer)] != 0));
    return sliding ? sliding_window - 1 : -1;
  }

  // ---- Gemma 1 / 2 / 3 (all neutral by default; Gemma 1: GeGLU, (1 + w), the embedding
  // scale, no sandwich norms) ----
  // The MLP's gate activation: SiLU (SwiGLU) or GELU's tanh approximation (GeGLU,
  // HF's gelu_pytorch_tanh).
  enum class Activation : uint8_t { kSilu, kGeluTanh } activation = Activation::kSilu;
  // "Sandwich" norms: post_attention_layernorm normalizes the attention output before the
  // residual add, pre_feedforward_layernorm is the MLP's input norm and
  // post_feedforward_layernorm normalizes its output (weights.h has the tensor names).
  bool sandwich_norms = false;
  // Every RMSNorm weight (layers, final, q/k norms) is stored as w and applied as (1 + w)
  // (HF's Gemma checkpoints); llama.cpp's converter already added the 1, so GGUF files say no.
  bool norm_weight_offset = false;
  // The softmax scale; 0 => 1 / sqrt(head_dim). Gemma: query_pre_attn_scalar ** -0.5.
  double attention_scale = 0.0;
  // softcap * tanh(x / softcap) on the attention scores / the final logits; 0 => off.
  double attn_logit_softcap = 0.0;
  double final_logit_softcap = 0.0;
  // The embedding rows are multiplied by this (Gemma: sqrt(hidden_size)); 0 => not at all.
  // Kept in double: each model rounds it to the dtype it computes in, as HF rounds it to the
  // weights' dtype (the float32 CPU model: float32; a bf16 model would see 55.5 for 3072).
  double embedding_scale = 0.0;
  // Gemma 3: the sliding layers rotate with this base and no scaling (rope_local_base_freq);
  // rope_theta, rope_scaling apply to the global layers only. 0 => every layer alike.
  double rope_local_theta = 0.0;

  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  std::vector<int64_t> extra_eos_ids;  // further ids that end generation (HF eos lists)
};

// The context a model supports (vLLM's rule), 0 when max_position_embeddings is unknown:
// max_position_embeddings, times the RoPE scaling factor where that scaling exists to extend
// it: linear and dynamic scale max_position_embeddings, yarn scales its original context
// (original_max_position_embeddings x factor); llama3 and longrope configs, and Gemma 3's
// per-layer scaling, already state the extended length. Factors <= 1 extend nothing.
int64_t scaled_context_length(const ModelConfig& c);

}  // namespace kvattn
