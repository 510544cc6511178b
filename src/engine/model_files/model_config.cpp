// ModelConfig from GGUF metadata ("<arch>.embedding_length", ...) or from an HF config.json.
#include <cmath>
#include <filesystem>

#include "engine/model_files/gemma_config.h"
#include "engine/model_files/json_util.h"
#include "engine/model_files/rope_scaling.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

// Bounds that no real model exceeds; they keep forged values from driving huge allocations.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;

void check_range(const std::string& file, const char* field, int64_t v, int64_t lo, int64_t hi) {
  KVATTN_CHECK(v >= lo && v <= hi, file, ": ", field, " is ", v, " but must lie in [", lo, ", ",
               hi, "]");
}

void validate_config(const ModelConfig& c, const std::string& file) {
  check_range(file, "vocab_size", c.vocab_size, 1, kMaxVocab);
  check_range(file, "hidden_size", c.hidden_size, 1, kMaxDim);
  check_range(file, "intermediate_size", c.intermediate_size, 1, kMaxDim);
  check_range(file, "num_layers", c.num_layers, 1, kMaxLayers);
  check_range(file, "num_heads", c.num_heads, 1, 4096);
  check_range(file, "num_kv_heads", c.num_kv_heads, 1, c.num_heads);
  check_range(file, "head_dim", c.head_dim, 2, 4096);
  KVATTN_CHECK(c.num_heads % c.num_kv_heads == 0, file, ": num_heads ", c.num_heads,
               " is not a multiple of num_kv_heads ", c.num_kv_heads);
  KVATTN_CHECK(c.head_dim % 2 == 0, file, ": head_dim ", c.head_dim, " must be even for RoPE");
  KVATTN_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < 1, file, ": rms_norm_eps is ",
               c.rms_norm_eps);
  KVATTN_CHECK(c.rope_theta > 0, file, ": rope_theta is ", c.rope_theta);
  check_range(file, "max_position_embeddings", c.max_position_embeddings, 1, int64_t{1} << 32);
  check_range(file, "bos_token_id", c.bos_token_id, -1, c.vocab_size - 1);
  check_range(file, "eos_token_id", c.eos_token_id, -1, c.vocab_size - 1);
  for (int64_t id : c.extra_eos_ids) check_range(file, "eos_token_id", id, 0, c.vocab_size - 1);
  validate_rope_scaling(c.rope_scaling, file);
  KVATTN_CHECK(c.rotary_dim == 0 || (c.rotary_dim >= 2 && c.rotary_dim < c.head_dim &&
                                      c.rotary_dim % 2 == 0),
               file, ": the rotary dims (", c.rotary_dim, ") must be even and in [2, head_dim = ",
               c.head_dim, "]");
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    KVATTN_CHECK(static_cast<int64_t>(c.rope_scaling.short_factor.size()) == c.rope_dim() / 2,
                 file, ": rope scaling (longrope) has ", c.rope_scaling.short_factor.size(),
                 " factors a list but the rotary dims / 2 are ", c.rope_dim() / 2);
    KVATTN_CHECK(c.rope_freq_factors.empty(), file,
                 ": rope_freqs and LongRoPE factors cannot both apply");
  }
  KVATTN_CHECK(c.rope_freq_factors.empty() ||
                   static_cast<int64_t>(c.rope_freq_factors.size()) == c.rope_dim() / 2,
               file, ": rope_freq_factors has ", c.rope_freq_factors.size(),
               " entries but the rotary dims / 2 are ", c.rope_dim() / 2);
  check_range(file, "sliding_window", c.sliding_window, 0, int64_t{1} << 32);
  KVATTN_CHECK(c.sliding_layers.empty() ||
                   static_cast<int64_t>(c.sliding_layers.size()) == c.num_layers,
               file, ": sliding_layers has ", c.sliding_layers.size(), " entries but there are ",
               c.num_layers, " layers");
  for (auto [name, v] : {std::pair{"attention scale", c.attention_scale},
                         {"attention logit softcap", c.attn_logit_softcap},
                         {"final logit softcap", c.final_logit_softcap},
                         {"embedding scale", c.embedding_scale},
                         {"local rope_theta", c.rope_local_theta}}) {
    KVATTN_CHECK(std::isfinite(v) && v >= 0, file, ": ", name,
                 " must be finite and >= 0 (0 = off) but is ", v);
  }
}

// A window no shorter than the context never masks a key (Phi-3 128k: 262144 over 131072
// positions): drop it, so that nothing downstream pays for it or refuses it (the CUDA fp8
// cache refuses windows). Not where the sliding layers also pick Gemma 3's local RoPE.
void drop_inert_window(ModelConfig& c) {
  if (c.sliding_window > 0 && c.max_position_embeddings > 0 && c.rope_local_theta == 0 &&
      c.sliding_window >= c.max_position_embeddings) {
    c.sliding_window = 0;
    c.sliding_layers.clear();
  }
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& g) {
  const std::string& file = g.path();
  ModelConfig c;
  c.architecture = g.get_string("general.architecture", "");
  KVATTN_CHECK(c.architecture == "llama" || c.architecture == "qwen2" ||
                   c.architecture == "qwen3" || c.architecture == "phi3" || is_gemma(c),
               file, ": general.architecture is '", c.architecture,
               "' (supported: llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3)");
  const std::string a = c.architecture + ".";
  auto need = [&](const std::string& key) {
    KVATTN_CHECK(g.find(key) != nullptr, file, ": metadata key '", key, "' is missing");
    return g.get_int(key, 0);  // a wrong type is reported with the file and the key
  };
  c.hidden_size = need(a + "embedding_length");
  c.intermediate_size = need(a + "feed_forward_length");
  c.num_layers = need(a + "block_count");
  c.num_heads = need(a + "attention.head_count");
  c.num_kv_heads = g.get_int(a + "attention.head_count_kv", c.num_heads);
  c.head_dim = g.get_int(a + "attention.key_length",
                         c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  const int64_t rope_dims = g.get_int(a + "rope.dimension_count", c.head_dim);
  // Partial rotary embeddings: phi3 only (Phi-4-mini); the other graphs rotate whole heads.
  KVATTN_CHECK(rope_dims == c.head_dim || (c.architecture == "phi3" && rope_dims < c.head_dim),
               file, ": ", a, "rope.dimension_count is ", rope_dims, " but head_dim is ",
               c.head_dim, " (partial rotary embeddings are supported for phi3 only)");
  c.rotary_dim = rope_dims == c.head_dim ? 0 : rope_dims;
  const int64_t value_len = g.get_int(a + "attention.value_length", c.head_dim);
  KVATTN_CHECK(value_len == c.head_dim, file, ": ", a, "attention.value_length is ", value_len,
               " but key_length is ", c.head_dim);
  c.rms_norm_eps = g.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_theta = g.get_float(a + "rope.freq_base", 10000.0);
  c.max_position_embeddings = g.get_int(a + "context_length", 2048);

  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  KVATTN_CHECK(embd != nullptr && embd->ne.size() == 2, file,
               ": tensor 'token_embd.weight' is missing or not 2-D");
  c.vocab_size = g.get_int(a + "vocab_size", embd->ne[1]);
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  c.rope_style = c.architecture == "llama" ? ModelConfig::RopeStyle::kInterleaved
                                           : ModelConfig::RopeStyle::kRotateHalf;
  c.qk_norm = c.architecture == "qwen3";
  c.rope_scaling = rope_scaling_from_gguf(g, c);
  c.rope_freq_factors = rope_freq_factors_from_gguf(g, c);
  // Biases are optional tensors in llama.cpp's llama/qwen2/qwen3 graphs; layer 0 decides and
  // validate_weights then requires them in every layer.
  c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = g.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.sliding_window = g.get_int(a + "attention.sliding_window", 0);
  if (is_gemma(c)) gemma_from_gguf(g, c);
  c.bos_token_id = g.get_int("tokenizer.ggml.bos_token_id", -1);
  c.eos_token_id = g.get_int("tokenizer.ggml.eos_token_id", -1);
  const int64_t eot = g.get_int("tokenizer.ggml.eot_token_id", -1);
  if (eot >= 0 && eot != c.eos_token_id) c.extra_eos_ids.push_back(eot);
  drop_inert_window(c);
  validate_config(c, file);
  return c;
}

ModelConfig config_from_hf_json(const std::string& path) {
  const nlohmann::json j = parse_json(read_text_file(path), path);
  KVATTN_CHECK(j.is_object(), path, ": must hold a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& { return json_field(j, key, path); };
  auto int_or = [&](const char* key, int64_t fallback) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? fallback : json_int(*it, key, path);
  };
  auto num_or = [&](const char* key, double fallback) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? fallback : json_number(*it, key, path);
  };

  ModelConfig c;
  const nlohmann::json& archs = field("architectures");
  KVATTN_CHECK(archs.is_array() && !archs.empty(), path,
               ": field 'architectures' must be a non-empty array");
  const std::string& arch = json_string(archs[0], "architectures[0]", path);
  if (arch == "LlamaForCausalLM") c.architecture = "llama";
  else if (arch == "MistralForCausalLM") c.architecture = "mistral";
  else if (arch == "Qwen2ForCausalLM") c.architecture = "qwen2";
  else if (arch == "Qwen3ForCausalLM") c.architecture = "qwen3";
  else if (arch == "GemmaForCausalLM") c.architecture = "gemma";
  else if (arch == "Gemma2ForCausalLM") c.architecture = "gemma2";
  else if (arch == "Gemma3ForCausalLM") c.architecture = "gemma3";  // text-only (gemma3_text)
  else if (arch == "Phi3ForCausalLM") c.architecture = "phi3";
  else KVATTN_FAIL(path, ": architecture '", arch,
                   "' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                   "Qwen3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
                   "Phi3ForCausalLM)");

  c.vocab_size = json_int(field("vocab_size"), "vocab_size", path);
  c.hidden_size = json_int(field("hidden_size"), "hidden_size", path);
  c.intermediate_size = json_int(field("intermediate_size"), "intermediate_size", path);
  c.num_layers = json_int(field("num_hidden_layers"), "num_hidden_layers", path);
  c.num_heads = json_int(field("num_attention_heads"), "num_attention_heads", path);
  c.num_kv_heads = int_or("num_key_value_heads", c.num_heads);
  // HF's Gemma configs default head_dim to 256 (gemma-7b: hidden 3072 / 16 heads = 192), their
  // context to 8192 (Gemma 3: 131072).
  const bool gemma = is_gemma(c);
  c.head_dim = int_or("head_dim",
                      gemma ? 256 : c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.rms_norm_eps = num_or("rms_norm_eps", 1e-6);
  c.rope_theta = num_or("rope_theta", 10000.0);
  // transformers >= 5 writes {"rope_parameters": {"rope_theta": ..., "rope_type": "default"}}
  // instead of the top-level rope_theta / rope_scaling.
  const nlohmann::json* rope_params = nullptr;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    KVATTN_CHECK(rp->is_object(), path, ": field 'rope_parameters' must be an object");
    if (auto theta = rp->find("rope_theta"); theta != rp->end() && j.find("rope_theta") == j.end()) {
      c.rope_theta = json_number(*theta, "rope_parameters.rope_theta", path);
    }
    rope_params = &*rp;
  }
  c.max_position_embeddings = int_or(
      "max_position_embeddings", !gemma ? 2048 : c.architecture == "gemma3" ? 131072 : 8192);
  auto tie = j.find("tie_word_embeddings");
  c.tie_word_embeddings = tie != j.end() && json_bool(*tie, "tie_word_embeddings", path);
  // transformers 4.x: rope_scaling (it wins over a 5.x rope_parameters in the same file).
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) rope_params = &*rs;
  if (c.architecture == "phi3") {
    // Phi-4-mini rotates int(head_dim * partial_rotary_factor) dims of each head (HF's Phi3
    // splits q/k there); transformers 5 keeps the factor in rope_parameters, 4.x at the top.
    double prf = num_or("partial_rotary_factor", 1.0);
    if (rope_params != nullptr && rope_params->is_object()) {
      if (auto f = rope_params->find("partial_rotary_factor");
          f != rope_params->end() && !f->is_null()) {
        prf = json_number(*f, "partial_rotary_factor", path);
      }
    }
    KVATTN_CHECK(prf > 0.0 && prf <= 1.0, path, ": partial_rotary_factor must be in (0, 1] but is ",
                 prf);
    const auto rd = static_cast<int64_t>(static_cast<double>(c.head_dim) * prf);
    c.rotary_dim = rd == c.head_dim ? 0 : rd;
  }
  if (rope_params != nullptr && c.architecture != "gemma3") {  // gemma3: per layer type
    c.rope_scaling = rope_scaling_from_hf(*rope_params, j, c, path);
  }
  auto flag = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && !it->is_null() && json_bool(*it, k, path);
  };
  KVATTN_CHECK(!flag("mlp_bias"), path, ": mlp_bias = true is not supported");
  // Qwen2 hard-codes q/k/v biases; Llama and Qwen3 put q/k/v/o biases behind attention_bias;
  // HF's Mistral and Phi-3 have none and ignore the flag.
  if (c.architecture == "qwen2") {
    c.qkv_bias = true;
  } else if (c.architecture != "mistral" && c.architecture != "phi3") {
    c.qkv_bias = c.o_bias = flag("attention_bias");
  }
  if (!is_gemma(c)) {
    // The MLP of Llama, Qwen2/3, Mistral and Phi-3 (fused gate_up_proj) is SwiGLU: HF's
    // hidden_act names the gate's activation, which kvattn computes as SiLU ("swish" is
    // transformers' other name for it). Any other would run as SiLU and give wrong tokens
    // silently, so it is refused. (Gemma's hidden_activation: gemma_config.cpp.)
    if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
      const std::string& a = json_string(*act, "hidden_act", path);
      KVATTN_CHECK(a == "silu" || a == "swish", path, ": hidden_act is '", a,
                   "' but kvattn's ", c.architecture, " MLP computes silu (SwiGLU) only");
    }
  }
  sliding_window_from_hf(j, c, path);
  c.rope_style = ModelConfig::RopeStyle::kRotateHalf;
  c.qk_norm = c.architecture == "qwen3";
  if (is_gemma(c)) gemma_from_hf(j, c, path);
  c.bos_token_id = int_or("bos_token_id", -1);
  if (auto eos = j.find("eos_token_id"); eos != j.end() && !eos->is_null()) {
    if (eos->is_array()) {
      for (const auto& e : *eos) {
        const int64_t id = json_int(e, "eos_token_id", path);
        if (c.eos_token_id < 0) c.eos_token_id = id;
        else if (id != c.eos_token_id) c.extra_eos_ids.push_back(id);
      }
    } else {
      c.eos_token_id = json_int(*eos, "eos_token_id", path);
    }
  }
  drop_inert_window(c);
  validate_config(c, path);
  return c;
}

}  // namespace kvattn
