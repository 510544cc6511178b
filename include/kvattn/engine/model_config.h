// ModelConfig: the shape of a Llama-family decoder (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3), read
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
  enum class Type : uint8_t { kNone, kLinear, kDynamic, kLlama3, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;            // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (the pretraining context)
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  bool truncate = true;                          // yarn: integer correction range
  double attention_factor = 1.0;  // yarn: cos/sin multiplier (resolved at load: mscale)
};
std::string_view rope_scaling_name(RopeScaling::Type t);  // "none" | "linear" | ...

struct ModelConfig {
  std::string architecture;  // "llama" | "mistral" | "qwen2" | "qwen3"
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
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  std::vector<int64_t> extra_eos_ids;  // further ids that end generation (HF eos lists)
};

}  // namespace kvattn
