// Model weights as host tensors under Hugging Face names (float32; bf16/f16 when an HF checkpoint
// is loaded with HfLoadOptions::keep_16bit), plus the config that shapes them.
//
// Tensor names and shapes (row-major, [out, in] for projections as in HF):
//   model.embed_tokens.weight                     [vocab, hidden]
//   model.layers.N.input_layernorm.weight         [hidden]
//   model.layers.N.self_attn.q_proj.weight        [num_heads * head_dim, hidden]
//   model.layers.N.self_attn.{k,v}_proj.weight    [num_kv_heads * head_dim, hidden]
//   model.layers.N.self_attn.o_proj.weight        [hidden, num_heads * head_dim]
//   model.layers.N.self_attn.{q,k,v}_proj.bias    [rows of the weight]  (qkv_bias only)
//   model.layers.N.self_attn.o_proj.bias          [hidden]              (o_bias only)
//   model.layers.N.self_attn.{q,k}_norm.weight    [head_dim]          (qwen3 only)
//   model.layers.N.post_attention_layernorm.weight [hidden]  (the MLP's input norm; with
//                                                  sandwich_norms (Gemma) the attention
//                                                  output's norm)
//   model.layers.N.{pre,post}_feedforward_layernorm.weight [hidden]  (sandwich_norms only)
//   model.layers.N.mlp.{gate,up}_proj.weight      [intermediate, hidden]
//   model.layers.N.mlp.down_proj.weight           [hidden, intermediate]
//   model.norm.weight                             [hidden]
//   lm_head.weight                                [vocab, hidden]     (absent when tied)
// Both loaders check that every one of these exists with exactly this shape. Phi-3's fused
// tensors (HF self_attn.qkv_proj / mlp.gate_up_proj; GGUF attn_qkv / ffn_up holding gate then
// up) are split into these names at load, each part a row range sharing the fused tensor's
// memory (or, kept quantized, its file blocks).
//
// RoPE pairing: llama-architecture GGUF files store the Q/K rows of each head permuted (HF's
// convert script interleaves the two halves so that GGML can rotate adjacent pairs). We keep
// GGUF's row order and report RopeStyle::kInterleaved rather than un-permuting at load: the
// math is identical, the loader stays a plain copy, and K in the cache matches llama.cpp's.
// Qwen3 GGUF files and all HF checkpoints use kRotateHalf.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "kvattn/core/tensor.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/model_config.h"

namespace kvattn {

// A GGUF tensor left in its file's quantized blocks (see load_gguf_model's keep_quantized):
// row-major [rows, cols], each row cols / block_elems blocks, read in place from the mapping
// `owner` keeps alive.
struct QuantizedWeight {
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;          // [rows, cols]
  std::span<const uint8_t> bytes;      // rows * row_bytes
  std::shared_ptr<const void> owner;   // the file mapping
  int64_t row_bytes() const;
  Tensor dequantize() const;           // float32 [rows, cols]
};

struct ModelWeights {
  ModelConfig config;
  // Host tensors, float32 unless loaded with HfLoadOptions::keep_16bit (then bf16/f16 ones
  // may be read in place from the file mapping: read-only, see widen_to_f32).
  std::map<std::string, Tensor> tensors;
  // Projection and embedding matrices kept quantized (GGUF with keep_quantized): a name is
  // in `tensors` or here, never both. Models that need float32 call dequantize_all().
  std::map<std::string, QuantizedWeight> quantized;
  // HF files: tensors left out for a dtype other than F32/F16/BF16 (name -> safetensors
  // dtype), so that validate_weights can say why a required one is not there.
  std::map<std::string, std::string> skipped_dtypes;
  // GGUF files: each tensor's type in the file (`tensors` holds float32 copies of the plain
  // ones), so that the CPU model keeps a float file's precision (WeightFormat::kGguf).
  std::map<std::string, GgmlType> file_types;
};

// Moves every `quantized` entry into `tensors` as float32.
void dequantize_all(ModelWeights& weights);

// Replaces every bf16/f16 entry of `tensors` by its float32 values (exact); float32 ones are
// left as they are. The CPU model and anything that needs float32 call it.
void widen_to_f32(ModelWeights& weights);
// One host tensor as float32: `t` itself when float32, else a new float32 copy of a bf16/f16
// tensor (never written through `t`, which may be a read-only file mapping).
Tensor widen_to_f32(const Tensor& t);

struct GgufLoadOptions {
  // Keep 2-D quantized tensors (Q4_0, Q4_1, Q8_0, K types, ...) in the file's blocks
  // (ModelWeights::quantized) instead of dequantizing them: the CPU model computes on them.
  bool keep_quantized = false;
};

// `progress` (optional) is called with the fraction of tensor bytes loaded so far, in [0, 1].
using LoadProgress = std::function<void(double)>;

// GGUF (architectures "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3" and "phi3"; llama.cpp's names, biases
// included; the Llama 3 tensor rope_freqs.weight goes into config.rope_freq_factors, Phi-3's
// rope_factors_{short,long}.weight into config.rope_scaling): dequantizes F32/F16/BF16/Q8_0/Q4_0/Q4_1/
// Q5_0/Q5_1 and Q2_K/Q3_K/Q4_K/Q5_K/Q6_K to float32 (unless keep_quantized) and renames tensors to the HF names
// above.
ModelWeights load_gguf_model(const std::string& path, const LoadProgress& progress = {},
                             const GgufLoadOptions& options = {});
// The same from a GgufFile already open (e.g. shared with Tokenizer::from_gguf).
ModelWeights load_gguf_model(const GgufFile& gguf, const LoadProgress& progress = {},
                             const GgufLoadOptions& options = {});

struct HfLoadOptions {
  // Keep BF16 and F16 tensors in their file dtype (kBF16 / kF16 host tensors read in place
  // from the file mapping, which they keep alive; read-only) instead of converting them to
  // float32: the CUDA model uploads bf16 as it is, without a float32 round trip. F32 tensors
  // are float32 either way. Model::create widens to float32 where it needs it (the CPU model).
  bool keep_16bit = false;
};

// HF directory: config.json plus model.safetensors, or model.safetensors.index.json and the
// shards it names (bf16/f16/f32 converted to float32 unless options.keep_16bit).
// Architectures LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (text-only) and Phi3ForCausalLM. Gemma's norm weights stay as the file
// has them (w; the model applies 1 + w, config.norm_weight_offset).
ModelWeights load_hf_model(const std::string& dir, const LoadProgress& progress = {},
                           const HfLoadOptions& options = {});

// Config only, for `kvattn info` and for tests.
ModelConfig config_from_gguf(const GgufFile& gguf);
ModelConfig config_from_hf_json(const std::string& config_json_path);

// Throws kvattn::Error naming the first missing tensor or wrong shape (see the table above).
void validate_weights(const ModelWeights& weights, const std::string& source);

}  // namespace kvattn
