// ModelConfig: the shape of a Llama- or Qwen3-family decoder, read from GGUF metadata or from an
// HF config.json (see weights.h). Everything the forward pass needs to interpret the weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvattn {

struct ModelConfig {
  std::string architecture;  // "llama" | "qwen3"
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
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  std::vector<int64_t> extra_eos_ids;  // further ids that end generation (HF eos lists)
};

}  // namespace kvattn
