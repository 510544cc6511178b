// RoPE scaling (linear, dynamic NTK, Llama 3, YaRN) and the sliding window, from HF config.json
// and from GGUF metadata. The meanings are transformers' modeling_rope_utils (5.x) and
// llama.cpp's; the cos/sin tables themselves are built in engine/model/rope.cpp.
#include "engine/model_files/rope_scaling.h"

#include <cmath>

#include "engine/model_files/json_util.h"

namespace kvattn {
namespace {

using Type = RopeScaling::Type;

// LongRoPE's default cos/sin multiplier for a context stretched `scale` times over
// `original` positions: sqrt(1 + ln(scale) / ln(original)), 1 when not stretched (HF's
// _compute_longrope_parameters; llama.cpp's converter writes the same as attn_factor).
// How many times the model's context stretches its pretraining one: max_position_embeddings /
// original (YaRN's and LongRoPE's default factor), or `fallback` without an original length.
double context_stretch(const ModelConfig& c, int64_t original, double fallback) {
  return original > 0 ? static_cast<double>(c.max_position_embeddings) /
                            static_cast<double>(original)
                      : fallback;
}

double longrope_mscale(double scale, int64_t original) {
  return scale <= 1.0 || original <= 1
             ? 1.0
             : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original)));
}

// YaRN's default cos/sin multiplier (the paper's 0.1 ln(s) + 1), as HF's get_mscale.
double yarn_mscale(double scale, double mscale = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

std::string_view rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case Type::kNone: return "none";
    case Type::kLinear: return "linear";
    case Type::kDynamic: return "dynamic";
    case Type::kLlama3: return "llama3";
    case Type::kYarn: return "yarn";
    case Type::kLongRope: return "longrope";
  }
  return "?";
}

int64_t scaled_context_length(const ModelConfig& c) {
  const int64_t base = c.max_position_embeddings;
  const RopeScaling& s = c.rope_scaling;
  if (base <= 0 || !(s.factor > 1.0) || !std::isfinite(s.factor)) return base;
  double extended = 0.0;
  if (s.type == Type::kLinear || s.type == Type::kDynamic) {
    extended = static_cast<double>(base) * s.factor;
  } else if (s.type == Type::kYarn) {
    const int64_t original = s.original_max_position_embeddings;
    extended = static_cast<double>(original > 0 ? original : base) * s.factor;
  } else {
    return base;
  }
  constexpr double kMax = static_cast<double>(int64_t{1} << 32);
  return std::max(base, static_cast<int64_t>(std::min(extended, kMax)));
}

void validate_rope_scaling(const RopeScaling& s, const std::string& file) {
  const std::string t(rope_scaling_name(s.type));
  if (s.type == Type::kNone) return;
  KVATTN_CHECK(finite_positive(s.factor), file, ": rope scaling (", t,
               ") factor must be finite and > 0 but is ", s.factor);
  if (s.type == Type::kLlama3 || s.type == Type::kYarn || s.type == Type::kLongRope) {
    KVATTN_CHECK(s.original_max_position_embeddings >= 1 &&
                     s.original_max_position_embeddings <= (int64_t{1} << 32),
                 file, ": rope scaling (", t, ") original_max_position_embeddings must lie in [1, ",
                 int64_t{1} << 32, "] but is ", s.original_max_position_embeddings);
  }
  if (s.type == Type::kLlama3) {
    KVATTN_CHECK(finite_positive(s.low_freq_factor) && finite_positive(s.high_freq_factor) &&
                     s.high_freq_factor != s.low_freq_factor,
                 file, ": rope scaling (llama3) low_freq_factor ", s.low_freq_factor,
                 " and high_freq_factor ", s.high_freq_factor,
                 " must be finite, > 0 and different");
  }
  if (s.type == Type::kYarn) {
    KVATTN_CHECK(finite_positive(s.beta_fast) && finite_positive(s.beta_slow), file,
                 ": rope scaling (yarn) beta_fast ", s.beta_fast, " and beta_slow ", s.beta_slow,
                 " must be finite and > 0");
  }
  if (s.type == Type::kYarn || s.type == Type::kLongRope) {
    KVATTN_CHECK(finite_positive(s.attention_factor), file, ": rope scaling (", t,
                 ") attention_factor must be finite and > 0 but is ", s.attention_factor);
  }
  if (s.type == Type::kLongRope) {
    KVATTN_CHECK(!s.short_factor.empty() && s.short_factor.size() == s.long_factor.size(), file,
                 ": rope scaling (longrope) short_factor and long_factor must be non-empty and "
                 "of one length but have ", s.short_factor.size(), " and ", s.long_factor.size(),
                 " entries");
    for (const auto* list : {&s.short_factor, &s.long_factor}) {
      const char* name = list == &s.short_factor ? "short_factor" : "long_factor";
      for (size_t i = 0; i < list->size(); ++i) {
        KVATTN_CHECK(finite_positive((*list)[i]), file, ": rope scaling (longrope) ", name, "[",
                     i, "] must be finite and > 0 but is ", (*list)[i]);
      }
    }
  }
}



RopeScaling rope_scaling_from_hf(const nlohmann::json& p, const nlohmann::json& top,
                                 const ModelConfig& c, const std::string& file) {
  RopeScaling s;
  if (p.is_null()) return s;
  KVATTN_CHECK(p.is_object(), file, ": rope_scaling / rope_parameters must be an object");
  std::string type = "default";
  for (const char* k : {"type", "rope_type"}) {  // rope_type wins when both are present
    if (auto t = p.find(k); t != p.end() && !t->is_null()) type = json_string(*t, k, file);
  }
  for (const auto& [key, value] : p.items()) {
    KVATTN_CHECK(!value.is_object(), file, ": rope_parameters.", key,
                 " is an object: per-layer-type RoPE parameters are not supported");
  }
  auto num = [&](const char* key, double fallback) {
    auto it = p.find(key);
    return it == p.end() || it->is_null() ? fallback : json_number(*it, key, file);
  };
  auto need = [&](const char* key) {
    return json_number(json_field(p, key, file), key, file);
  };
  // transformers' standardize_rope_params: a top-level original_max_position_embeddings
  // (Phi-3) wins, then the one in the parameters, then max_position_embeddings.
  auto original_max = [&]() -> int64_t {
    for (const nlohmann::json* obj : {&top, &p}) {
      if (auto it = obj->find("original_max_position_embeddings");
          obj->is_object() && it != obj->end() && !it->is_null()) {
        return json_int(*it, "original_max_position_embeddings", file);
      }
    }
    return c.max_position_embeddings;
  };
  if (type == "default") {
    return s;
  } else if (type == "linear") {
    s.type = Type::kLinear;
    s.factor = need("factor");
  } else if (type == "dynamic") {
    s.type = Type::kDynamic;
    s.factor = need("factor");
    s.original_max_position_embeddings = c.max_position_embeddings;
  } else if (type == "llama3") {
    s.type = Type::kLlama3;
    s.factor = need("factor");
    s.low_freq_factor = need("low_freq_factor");
    s.high_freq_factor = need("high_freq_factor");
    s.original_max_position_embeddings = original_max();
  } else if (type == "yarn") {
    s.type = Type::kYarn;
    s.original_max_position_embeddings = original_max();
    s.factor = num("factor", context_stretch(c, s.original_max_position_embeddings, 0.0));
    s.beta_fast = num("beta_fast", 32.0);
    s.beta_slow = num("beta_slow", 1.0);
    if (s.beta_fast == 0) s.beta_fast = 32.0;  // HF: `get("beta_fast") or 32`
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    if (auto t = p.find("truncate"); t != p.end() && !t->is_null()) {
      s.truncate = json_bool(*t, "truncate", file);
    }
    const double mscale = num("mscale", 0.0), mscale_all_dim = num("mscale_all_dim", 0.0);
    s.attention_factor =
        num("attention_factor", mscale != 0 && mscale_all_dim != 0
                                    ? yarn_mscale(s.factor, mscale) /
                                          yarn_mscale(s.factor, mscale_all_dim)
                                    : yarn_mscale(s.factor));
  } else if (type == "longrope" || type == "su") {
    // HF's _compute_longrope_parameters: the default cos/sin multiplier comes from `factor`,
    // else from max_position_embeddings / original_max_position_embeddings (Phi-3 keeps the
    // latter at the top level). short_mscale / long_mscale (vLLM's) are not HF's: ignored, as
    // HF ignores them.
    s.type = Type::kLongRope;
    s.original_max_position_embeddings = original_max();
    s.factor = num("factor", context_stretch(c, s.original_max_position_embeddings, 1.0));
    s.attention_factor =
        num("attention_factor", longrope_mscale(s.factor, s.original_max_position_embeddings));
    auto factors = [&](const char* key) {
      const nlohmann::json& a = json_field(p, key, file);
      KVATTN_CHECK(a.is_array(), file, ": rope scaling (longrope) ", key, " must be an array");
      std::vector<float> out;
      for (size_t i = 0; i < a.size(); ++i) {
        out.push_back(static_cast<float>(
            json_number(a[i], std::string(key) + "[" + std::to_string(i) + "]", file)));
      }
      return out;
    };
    s.short_factor = factors("short_factor");
    s.long_factor = factors("long_factor");
    KVATTN_CHECK(static_cast<int64_t>(s.short_factor.size()) == c.rope_dim() / 2, file,
                 ": rope scaling (longrope) short_factor has ", s.short_factor.size(),
                 " entries but the rotary dims / 2 are ", c.rope_dim() / 2);
  } else {
    KVATTN_FAIL(file, ": rope scaling type '", type,
                "' is not supported (default, linear, dynamic, llama3, yarn, longrope)");
  }
  // Phi-3's factor is read by config_from_hf_json (c.rotary_dim); other architectures rotate
  // whole heads.
  if (auto prf = p.find("partial_rotary_factor");
      c.architecture != "phi3" && prf != p.end() && !prf->is_null()) {
    const double f = json_number(*prf, "partial_rotary_factor", file);
    KVATTN_CHECK(f == 1.0, file, ": partial_rotary_factor is ", f,
                 " (partial rotary embeddings are not supported)");
  }
  validate_rope_scaling(s, file);
  return s;
}

namespace {

// A 1-D float tensor of rotary dims / 2 entries (rope_freqs, rope_factors_*), or empty if absent.
std::vector<float> rope_factor_tensor(const GgufFile& g, const ModelConfig& c, const char* name) {
  const GgufTensorInfo* t = g.find_tensor(name);
  if (t == nullptr) return {};
  const int64_t half = c.rope_dim() / 2;
  KVATTN_CHECK(t->ne.size() == 1 && static_cast<int64_t>(t->ne[0]) == half, g.path(),
               ": tensor '", name, "' must be 1-D with rotary dims / 2 = ", half, " entries but has ",
               t->ne.size(), " dims, ", t->ne.empty() ? 0 : t->ne[0], " entries first");
  const Tensor f = g.dequantize(*t);
  std::vector<float> out(f.ptr<const float>(), f.ptr<const float>() + half);
  for (int64_t i = 0; i < half; ++i) {
    KVATTN_CHECK(finite_positive(out[i]), g.path(), ": ", name, "[", i,
                 "] must be finite and > 0 but is ", out[i]);
  }
  return out;
}

// llama.cpp's LongRoPE (Phi-3 128k / 3.5): the tensors rope_factors_short.weight and
// rope_factors_long.weight, "<arch>.rope.scaling.original_context_length" and
// ".attn_factor" (the cos/sin multiplier; absent: HF's default from the two lengths).
RopeScaling longrope_from_gguf(const GgufFile& g, const ModelConfig& c) {
  RopeScaling s;
  s.short_factor = rope_factor_tensor(g, c, "rope_factors_short.weight");
  s.long_factor = rope_factor_tensor(g, c, "rope_factors_long.weight");
  if (s.short_factor.empty() && s.long_factor.empty()) return s;
  KVATTN_CHECK(!s.short_factor.empty() && !s.long_factor.empty(), g.path(),
               ": rope_factors_short.weight and rope_factors_long.weight come together, but only ",
               s.short_factor.empty() ? "the long" : "the short", " one is present");
  const std::string a = c.architecture + ".rope.scaling.";
  s.type = RopeScaling::Type::kLongRope;
  KVATTN_CHECK(g.find(a + "original_context_length") != nullptr, g.path(), ": metadata key '", a,
               "original_context_length' is missing (LongRoPE factors need it)");
  s.original_max_position_embeddings = g.get_int(a + "original_context_length", 0);
  s.factor = context_stretch(c, s.original_max_position_embeddings, 1.0);
  s.attention_factor =
      g.get_float(a + "attn_factor", longrope_mscale(s.factor, s.original_max_position_embeddings));
  validate_rope_scaling(s, g.path());
  return s;
}

}  // namespace

RopeScaling rope_scaling_from_gguf(const GgufFile& g, const ModelConfig& c) {
  const std::string& file = g.path();
  const std::string a = c.architecture + ".rope.scaling.";
  RopeScaling s;
  const std::string type = g.get_string(a + "type", "none");
  if (type == "none") return longrope_from_gguf(g, c);
  const double factor = g.get_float(a + "factor", 0.0);
  if (type == "linear") {
    s.type = Type::kLinear;
    s.factor = factor;
  } else if (type == "yarn") {
    s.type = Type::kYarn;
    s.factor = factor;
    s.original_max_position_embeddings = g.get_int(a + "original_context_length", 0);
    s.beta_fast = g.get_float(a + "yarn_beta_fast", 32.0);
    s.beta_slow = g.get_float(a + "yarn_beta_slow", 1.0);
    const double log_mul = g.get_float(a + "yarn_log_multiplier", 0.0);
    KVATTN_CHECK(log_mul == 0.0, file, ": ", a, "yarn_log_multiplier is ", log_mul,
                 " (DeepSeek-style YaRN mscale is not supported)");
    // llama.cpp: the cos/sin multiplier is attn_factor * (1 + 0.1 ln(factor)).
    s.attention_factor = g.get_float(a + "attn_factor", 1.0) * yarn_mscale(factor);
  } else {
    KVATTN_FAIL(file, ": ", a, "type '", type, "' is not supported (none, linear, yarn)");
  }
  validate_rope_scaling(s, file);
  return s;
}

std::vector<float> rope_freq_factors_from_gguf(const GgufFile& g, const ModelConfig& c) {
  return rope_factor_tensor(g, c, "rope_freqs.weight");
}

std::vector<uint8_t> sliding_layers_from_layer_types(const nlohmann::json& lt, int64_t num_layers,
                                                     const std::string& file) {
  KVATTN_CHECK(lt.is_array() && static_cast<int64_t>(lt.size()) == num_layers, file,
               ": layer_types must be an array of num_hidden_layers (", num_layers,
               ") strings");
  std::vector<uint8_t> sliding;
  for (size_t i = 0; i < lt.size(); ++i) {
    const std::string key = "layer_types[" + std::to_string(i) + "]";
    const std::string& t = json_string(lt[i], key, file);
    KVATTN_CHECK(t == "full_attention" || t == "sliding_attention", file, ": ", key, " is '", t,
                 "' (full_attention or sliding_attention)");
    sliding.push_back(t == "sliding_attention" ? 1 : 0);
  }
  return sliding;
}

void sliding_window_from_hf(const nlohmann::json& j, ModelConfig& c, const std::string& file) {
  c.sliding_window = 0;
  c.sliding_layers.clear();
  if (c.architecture != "mistral" && c.architecture != "qwen2" && c.architecture != "qwen3" &&
      c.architecture != "phi3") {
    return;  // HF's Llama ignores sliding_window
  }
  auto use = j.find("use_sliding_window");
  if (use != j.end() && !use->is_null() && !json_bool(*use, "use_sliding_window", file)) return;
  auto sw = j.find("sliding_window");
  if (sw == j.end() || sw->is_null()) return;
  c.sliding_window = json_int(*sw, "sliding_window", file);
  KVATTN_CHECK(c.sliding_window >= 1 && c.sliding_window <= (int64_t{1} << 32), file,
               ": sliding_window must lie in [1, ", int64_t{1} << 32, "] but is ",
               c.sliding_window);
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    c.sliding_layers = sliding_layers_from_layer_types(*lt, c.num_layers, file);
  } else if (use != j.end() && !use->is_null()) {  // Qwen2/Qwen3: the layers from max_window_layers
    auto mw = j.find("max_window_layers");
    const int64_t first = mw == j.end() || mw->is_null()
                              ? 28  // Qwen2Config's default
                              : json_int(*mw, "max_window_layers", file);
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers.push_back(i >= first ? 1 : 0);
  }
  // Mistral, Phi-3: every layer (sliding_layers stays empty).
}

}  // namespace kvattn
