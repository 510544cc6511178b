// `kvattn info`: the model's config, its tensors' shapes and stored dtypes (without loading
// the weights), and the tokenizer facts when the file carries them.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "kvattn/core/dtype.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/safetensors.h"
#include "kvattn/engine/tokenizer.h"
#include "kvattn/engine/weights.h"

namespace kvattn::cli {
namespace {

namespace fs = std::filesystem;

struct TensorRow {
  std::string name, shape, dtype;
  int64_t numel;
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void print_config(const ModelConfig& c) {
  std::printf("architecture:        %s\n", c.architecture.c_str());
  std::printf("layers:              %lld\n", static_cast<long long>(c.num_layers));
  std::printf("hidden:              %lld\n", static_cast<long long>(c.hidden_size));
  std::printf("intermediate:        %lld\n", static_cast<long long>(c.intermediate_size));
  std::printf("heads / kv heads:    %lld / %lld (head_dim %lld)\n",
              static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
              static_cast<long long>(c.head_dim));
  std::printf("vocab:               %lld\n", static_cast<long long>(c.vocab_size));
  std::printf("context:             %lld", static_cast<long long>(c.max_position_embeddings));
  if (const int64_t scaled = scaled_context_length(c); scaled != c.max_position_embeddings) {
    std::printf(" (%lld with its rope scaling)", static_cast<long long>(scaled));
  }
  std::printf("\n");
  std::printf("rope:                theta %g, %s pairs", c.rope_theta,
              c.rope_style == ModelConfig::RopeStyle::kRotateHalf ? "rotate-half"
                                                                   : "interleaved");
  if (c.rope_dim() != c.head_dim) {
    std::printf(", %lld of %lld dims a head", static_cast<long long>(c.rope_dim()),
                static_cast<long long>(c.head_dim));
  }
  std::printf("\n");
  const RopeScaling& rs = c.rope_scaling;
  if (!c.rope_freq_factors.empty()) {
    std::printf("rope scaling:        rope_freqs factors (llama3, %zu pairs)\n",
                c.rope_freq_factors.size());
  } else if (rs.type == RopeScaling::Type::kNone) {
    std::printf("rope scaling:        none\n");
  } else {
    std::printf("rope scaling:        %s, factor %g", std::string(rope_scaling_name(rs.type)).c_str(),
                rs.factor);
    if (rs.original_max_position_embeddings > 0) {
      std::printf(", original context %lld",
                  static_cast<long long>(rs.original_max_position_embeddings));
    }
    if (rs.type == RopeScaling::Type::kLlama3) {
      std::printf(", low/high freq factor %g/%g", rs.low_freq_factor, rs.high_freq_factor);
    }
    if (rs.type == RopeScaling::Type::kYarn || rs.type == RopeScaling::Type::kLongRope) {
      std::printf(", attention factor %g", rs.attention_factor);
    }
    if (rs.type == RopeScaling::Type::kLongRope) {
      std::printf(", %zu factor pairs (long ones above the original context)",
                  rs.short_factor.size());
    }
    std::printf("\n");
  }
  if (c.sliding_window > 0) {
    int64_t sliding = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) sliding += c.window_left(l) >= 0;
    std::printf("sliding window:      %lld tokens on %lld of %lld layers\n",
                static_cast<long long>(c.sliding_window), static_cast<long long>(sliding),
                static_cast<long long>(c.num_layers));
  } else {
    std::printf("sliding window:      none\n");
  }
  std::printf("attention biases:    %s\n", c.qkv_bias && c.o_bias ? "q/k/v and o"
                                          : c.qkv_bias          ? "q/k/v"
                                                                : "none");
  if (c.rope_local_theta > 0) {
    std::printf("local rope:          theta %g on the sliding layers (no scaling)\n",
                c.rope_local_theta);
  }
  if (c.sandwich_norms || c.activation != ModelConfig::Activation::kSilu) {  // Gemma 2/3
    std::printf("mlp / norms:         %s, %s%s\n",
                c.activation == ModelConfig::Activation::kGeluTanh ? "GeGLU (gelu tanh)" : "SwiGLU",
                c.sandwich_norms ? "pre/post norms around attention and MLP" : "pre-norms",
                c.norm_weight_offset ? ", RMSNorm (1 + w)" : "");
    std::printf("attention scale:     %g%s\n",
                c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(double(c.head_dim)),
                c.attention_scale > 0 ? "" : " (1/sqrt(head_dim))");
    std::printf("logit soft-capping:  attention %g, final %g (0 = off)\n", c.attn_logit_softcap,
                c.final_logit_softcap);
    // The CPU model multiplies by float32(scale); the CUDA model (bf16) by bf16(scale), as HF's
    // bf16 model does.
    std::printf("embedding scale:     %g (cuda: bf16 %g)\n", c.embedding_scale,
                c.embedding_scale != 0
                    ? bf16_to_float(float_to_bf16(static_cast<float>(c.embedding_scale)))
                    : 0.0);
  }
  std::printf("rms_norm_eps:        %g\n", c.rms_norm_eps);
  std::printf("qk_norm:             %s\n", c.qk_norm ? "yes" : "no");
  std::printf("tied embeddings:     %s\n", c.tie_word_embeddings ? "yes" : "no");
  std::printf("bos / eos:           %lld / %lld\n", static_cast<long long>(c.bos_token_id),
              static_cast<long long>(c.eos_token_id));
}

void print_tensors(const std::vector<TensorRow>& rows, bool all) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_dtype;  // count, elements
  int64_t total = 0;
  for (const auto& r : rows) {
    by_dtype[r.dtype].first += 1;
    by_dtype[r.dtype].second += r.numel;
    total += r.numel;
  }
  std::printf("parameters:          %lld (%.1f M) in %zu tensors\n",
              static_cast<long long>(total), total / 1e6, rows.size());
  for (const auto& [dt, ce] : by_dtype) {
    std::printf("  %-8s %4lld tensors, %lld elements\n", dt.c_str(),
                static_cast<long long>(ce.first), static_cast<long long>(ce.second));
  }
  std::printf("tensors%s:\n", all ? "" : " (layer 0 and the unlayered ones; --all for every one)");
  for (const auto& r : rows) {
    const bool layered = r.name.find("blk.") == 0 || r.name.find("model.layers.") == 0;
    const bool layer0 = r.name.find("blk.0.") == 0 || r.name.find("model.layers.0.") == 0;
    if (!all && layered && !layer0) continue;
    std::printf("  %-48s %-16s %s\n", r.name.c_str(), r.shape.c_str(), r.dtype.c_str());
  }
}

int info_gguf(const std::string& path, bool all) {
  GgufFile f = GgufFile::open(path);
  std::printf("file:                %s (GGUF v%u, %.1f MB)\n", path.c_str(), f.version(),
              f.file_size() / 1e6);
  print_config(config_from_gguf(f));
  try {
    Tokenizer tok = Tokenizer::from_gguf(f);
    const bool spm = f.get_string("tokenizer.ggml.model", "") == "llama";
    std::printf("tokenizer:           %s, %d tokens, chat template: %s\n",
                spm ? "SentencePiece BPE" : "byte-level BPE", tok.vocab_size(),
                tok.chat_template() ? "yes" : "no");
  } catch (const Error& e) {
    std::printf("tokenizer:           unavailable (%s)\n", e.what());
  }
  std::printf("kvattn CPU weights:  gguf: Q4_0 / Q4_1 / Q8_0 / Q2_K-Q6_K blocks computed on in "
              "place, F32 / F16 / BF16 kept, other types as f16 (`generate --weights` to "
              "change)\n");
  std::vector<TensorRow> rows;
  for (const auto& t : f.tensors()) {
    rows.push_back({t.name, shape_str(t.shape()), ggml_type_name(t.type), t.numel});
  }
  print_tensors(rows, all);
  return 0;
}

int info_hf(const fs::path& dir, bool all) {
  std::printf("directory:           %s (HF)\n", dir.c_str());
  print_config(config_from_hf_json((dir / "config.json").string()));
  std::printf("tokenizer:           %s\n",
              fs::exists(dir / "tokenizer.json") ? "tokenizer.json" : "none");
  std::printf("kvattn CPU weights:  float32 (converted at load; `generate --weights` to change)\n");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<TensorRow> rows;
  for (const auto& p : files) {
    SafetensorsFile f = SafetensorsFile::open(p.string());
    for (const auto& t : f.tensors()) rows.push_back({t.name, shape_str(t.shape), t.dtype, t.numel});
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  print_tensors(rows, all);
  return 0;
}

}  // namespace

int run_info(const std::string& model, bool all_tensors) {
  const std::string path = resolve_model_path(model);
  if (fs::is_directory(path)) return info_hf(path, all_tensors);
  return info_gguf(path, all_tensors);
}

}  // namespace kvattn::cli
