// Gemma 1 / Gemma 2 / Gemma 3 configuration: transformers' GemmaConfig / Gemma2Config /
// Gemma3TextConfig defaults and llama.cpp's gemma / gemma2 / gemma3 hyperparameters
// (llama-model.cpp's load_hparams, src/models/gemma*.cpp).
#include "engine/model_files/gemma_config.h"

#include <cmath>

#include "engine/model_files/json_util.h"
#include "engine/model_files/rope_scaling.h"

namespace kvattn {
namespace {

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

// Before any per-layer list is built from it (validate_config checks the rest later).
void check_layers(const ModelConfig& c, const std::string& file) {
  KVATTN_CHECK(c.num_layers >= 1 && c.num_layers <= 4096, file, ": num_layers is ", c.num_layers,
               " but must lie in [1, 4096]");
}

// Layer i slides unless it closes a period: HF's (i + 1) % pattern != 0, llama.cpp's
// set_swa_pattern (i % pattern < pattern - 1). A period of 1 => every layer global.
void periodic_layers(ModelConfig& c, int64_t pattern) {
  c.sliding_layers.clear();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    c.sliding_layers.push_back((i + 1) % pattern != 0 ? 1 : 0);
  }
}

bool any_sliding(const ModelConfig& c) {
  for (uint8_t s : c.sliding_layers) {
    if (s != 0) return true;
  }
  return false;
}

// Shared by both formats: what every Gemma is. Gemma 1 has Llama's two norms a layer.
void gemma_common(ModelConfig& c) {
  c.activation = ModelConfig::Activation::kGeluTanh;
  c.sandwich_norms = c.architecture != "gemma";
  c.qk_norm = c.architecture == "gemma3";
  c.rope_style = ModelConfig::RopeStyle::kRotateHalf;  // HF and llama.cpp (NeoX) alike
  c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
}

// Gemma 3's RoPE: 5.x rope_parameters {"full_attention": {...}, "sliding_attention": {...}}
// or 4.x rope_theta / rope_local_base_freq / rope_scaling.
void gemma3_rope_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file) {
  auto num_or = [&](const nlohmann::json& obj, const char* key, double fallback) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? fallback : json_number(*it, key, file);
  };
  c.rope_theta = num_or(j, "rope_theta", 1000000.0);  // Gemma3TextConfig's default_theta
  c.rope_local_theta = num_or(j, "rope_local_base_freq", 10000.0);
  c.rope_scaling = {};
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    KVATTN_CHECK(rp->is_object(), file, ": field 'rope_parameters' must be an object");
    if (rp->contains("full_attention") || rp->contains("sliding_attention")) {
      for (const auto& [key, value] : rp->items()) {
        KVATTN_CHECK(key == "full_attention" || key == "sliding_attention", file,
                     ": rope_parameters.", key,
                     " is not a layer type (full_attention, sliding_attention)");
        KVATTN_CHECK(value.is_object(), file, ": rope_parameters.", key, " must be an object");
      }
      if (auto full = rp->find("full_attention"); full != rp->end()) {
        c.rope_theta = num_or(*full, "rope_theta", c.rope_theta);
        c.rope_scaling = rope_scaling_from_hf(*full, j, c, file);
      }
      if (auto local = rp->find("sliding_attention"); local != rp->end()) {
        c.rope_local_theta = num_or(*local, "rope_theta", c.rope_local_theta);
        const RopeScaling s = rope_scaling_from_hf(*local, j, c, file);
        KVATTN_CHECK(s.type == RopeScaling::Type::kNone, file,
                     ": rope_parameters.sliding_attention has rope scaling '",
                     rope_scaling_name(s.type), "' (only the global layers' is supported)");
      }
      return;
    }
    c.rope_theta = num_or(*rp, "rope_theta", c.rope_theta);  // one set for every layer type
    c.rope_scaling = rope_scaling_from_hf(*rp, j, c, file);
  }
  // 4.x: rope_scaling scales the global layers (Gemma3RotaryEmbedding's full_attention).
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    c.rope_scaling = rope_scaling_from_hf(*rs, j, c, file);
  }
}

void refuse_bidirectional(const nlohmann::json& j, const std::string& file) {
  if (auto b = j.find("use_bidirectional_attention"); b != j.end() && !b->is_null()) {
    KVATTN_CHECK(!json_bool(*b, "use_bidirectional_attention", file), file,
                 ": use_bidirectional_attention = true (EmbeddingGemma) is not supported");
  }
}

// Both configs' default (GemmaConfig, Gemma2Config, Gemma3TextConfig): tied.
void default_tied(const nlohmann::json& j, ModelConfig& c) {
  if (auto tie = j.find("tie_word_embeddings"); tie == j.end() || tie->is_null()) {
    c.tie_word_embeddings = true;
  }
}

// Gemma 1: transformers 5's GemmaMLP applies ACT2FN[hidden_act], its config turning the
// released configs' legacy "gelu" into "gelu_pytorch_tanh"; transformers 4.x applied
// hidden_activation (null => gelu_pytorch_tanh) and ignored hidden_act. Where both readings
// are GELU's tanh form the model is unambiguous; anything else is refused.
void gemma1_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file) {
  auto act_of = [&](const char* key) -> std::string {
    auto a = j.find(key);
    return a == j.end() || a->is_null() ? "" : json_string(*a, key, file);
  };
  const std::string act = act_of("hidden_act"), act4 = act_of("hidden_activation");
  KVATTN_CHECK(act.empty() || act == "gelu" || act == "gelu_pytorch_tanh", file,
               ": hidden_act '", act, "' is not supported (gelu, gelu_pytorch_tanh: GELU's tanh "
               "form)");
  KVATTN_CHECK(act4.empty() || act4 == "gelu_pytorch_tanh", file, ": hidden_activation '", act4,
               "' is not supported (gelu_pytorch_tanh)");
  refuse_bidirectional(j, file);
  default_tied(j, c);
  // HF's GemmaAttention: scaling head_dim ** -0.5, no soft-cap, no window (sliding_window
  // is not a GemmaConfig field and is ignored, as HF does).
  c.attention_scale = 0.0;
  c.attn_logit_softcap = c.final_logit_softcap = 0.0;
  c.sliding_window = 0;
  c.sliding_layers.clear();
}

}  // namespace

void gemma_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file) {
  const bool g2 = c.architecture == "gemma2";
  check_layers(c, file);
  auto num_or = [&](const char* key, double fallback) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? fallback : json_number(*it, key, file);
  };
  gemma_common(c);
  c.norm_weight_offset = true;  // Gemma*RMSNorm: x_normed * (1 + w)
  if (c.architecture == "gemma") {
    gemma1_from_hf(j, c, file);
    return;
  }
  std::string act = "gelu_pytorch_tanh";
  if (auto a = j.find("hidden_activation"); a != j.end() && !a->is_null()) {
    act = json_string(*a, "hidden_activation", file);
  }
  KVATTN_CHECK(act == "gelu_pytorch_tanh", file, ": hidden_activation '", act,
               "' is not supported (gelu_pytorch_tanh)");
  refuse_bidirectional(j, file);
  const double qpas = num_or("query_pre_attn_scalar", 256.0);
  KVATTN_CHECK(finite_positive(qpas), file, ": query_pre_attn_scalar must be finite and > 0 but is ",
               qpas);
  c.attention_scale = std::pow(qpas, -0.5);  // Python's query_pre_attn_scalar ** -0.5
  // Gemma2Config's defaults: 50 and 30; Gemma3TextConfig's: none. null => off; HF divides
  // by the value, so an explicit 0 is refused.
  auto softcap = [&](const char* key, double fallback) {
    auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (it->is_null()) return 0.0;
    const double v = json_number(*it, key, file);
    KVATTN_CHECK(finite_positive(v), file, ": ", key, " must be finite and > 0 (or null) but is ",
                 v);
    return v;
  };
  c.attn_logit_softcap = softcap("attn_logit_softcapping", g2 ? 50.0 : 0.0);
  c.final_logit_softcap = softcap("final_logit_softcapping", g2 ? 30.0 : 0.0);
  default_tied(j, c);
  auto flag = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && !it->is_null() && json_bool(*it, k, file);
  };
  c.qkv_bias = c.o_bias = flag("attention_bias");  // HF: bias=attention_bias on q/k/v/o

  // Sliding layers: 5.x layer_types, else Gemma 2's alternation / Gemma 3's period.
  c.sliding_window = 0;
  c.sliding_layers.clear();
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    c.sliding_layers = sliding_layers_from_layer_types(*lt, c.num_layers, file);
  } else {
    int64_t pattern = 2;
    if (!g2) {
      auto p = j.find("sliding_window_pattern");
      pattern = p == j.end() || p->is_null() ? 6 : json_int(*p, "sliding_window_pattern", file);
      KVATTN_CHECK(pattern >= 1 && pattern <= (int64_t{1} << 20), file,
                   ": sliding_window_pattern must lie in [1, 2^20] but is ", pattern);
    }
    periodic_layers(c, pattern);
  }
  if (any_sliding(c)) {
    auto sw = j.find("sliding_window");
    KVATTN_CHECK(sw == j.end() || !sw->is_null(), file,
                 ": sliding_window is null but layer_types has sliding_attention layers");
    c.sliding_window = sw == j.end() ? 4096 : json_int(*sw, "sliding_window", file);
    KVATTN_CHECK(c.sliding_window >= 1 && c.sliding_window <= (int64_t{1} << 32), file,
                 ": sliding_window must lie in [1, ", int64_t{1} << 32, "] but is ",
                 c.sliding_window);
  }
  if (!g2) gemma3_rope_from_hf(j, c, file);
}

void gemma_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string& file = g.path();
  const bool g2 = c.architecture == "gemma2";
  const std::string a = c.architecture + ".";
  check_layers(c, file);
  gemma_common(c);
  c.norm_weight_offset = false;  // convert_hf_to_gguf.py stores 1 + w
  if (c.architecture == "gemma") {  // llama_model_gemma: none of the keys below
    c.attention_scale = 0.0;
    c.attn_logit_softcap = c.final_logit_softcap = 0.0;
    c.sliding_window = 0;
    c.sliding_layers.clear();
    return;
  }
  // llama.cpp's hparams: gemma2 soft-caps (defaults 50 / 30); gemma3 none unless written.
  c.attn_logit_softcap = g2 ? g.get_float(a + "attn_logit_softcapping", 50.0) : 0.0;
  c.final_logit_softcap = g.get_float(a + "final_logit_softcapping", g2 ? 30.0 : 0.0);
  for (auto [key, v] : {std::pair{"attn_logit_softcapping", c.attn_logit_softcap},
                        {"final_logit_softcapping", c.final_logit_softcap}}) {
    KVATTN_CHECK(std::isfinite(v) && v >= 0, file, ": ", a, key,
                 " must be finite and >= 0 (0 = off) but is ", v);
  }
  if (g.find(a + "attention.scale") != nullptr) {
    c.attention_scale = g.get_float(a + "attention.scale", 0.0);
    KVATTN_CHECK(finite_positive(c.attention_scale), file, ": ", a,
                 "attention.scale must be finite and > 0 but is ", c.attention_scale);
  } else if (c.num_layers == (g2 ? 46 : 62) && c.num_heads > 0) {  // llama.cpp's 27B rule
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.hidden_size / c.num_heads));
  }
  // Sliding layers: a window (gemma2: default 4096) on a period or a per-layer list.
  c.sliding_window = g.get_int(a + "attention.sliding_window", g2 ? 4096 : 0);
  c.sliding_layers.clear();
  const std::string pkey = a + "attention.sliding_window_pattern";
  if (const GgufValue* p = g.find(pkey); p != nullptr && p->is_array()) {
    using T = GgufValue::Type;
    const T et = p->elem_type();
    const bool flags = et != T::kString && et != T::kF32 && et != T::kF64 && et != T::kArray;
    KVATTN_CHECK(flags && static_cast<int64_t>(p->array_size()) == c.num_layers, file, ": ",
                 pkey, " must be a period or an array of block_count (", c.num_layers,
                 ") bools but is ", p->to_string());
    for (int64_t f : p->as_ints()) c.sliding_layers.push_back(f != 0 ? 1 : 0);
  } else {
    const int64_t pattern = g.get_int(pkey, g2 ? 2 : 6);
    KVATTN_CHECK(pattern >= 0 && pattern <= (int64_t{1} << 20), file, ": ", pkey,
                 " must lie in [0, 2^20] but is ", pattern);
    if (pattern == 0) {
      c.sliding_layers.assign(static_cast<size_t>(c.num_layers), 1);  // llama.cpp: all SWA
    } else {
      periodic_layers(c, pattern);
    }
  }
  if (!g2) c.rope_local_theta = g.get_float(a + "rope.freq_base_swa", 10000.0);
}

}  // namespace kvattn
