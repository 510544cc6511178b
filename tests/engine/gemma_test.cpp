// Gemma 1 / 2 / 3 on the CPU (issue 19; Gemma 1 in session 52) beyond the HF parity of
// model_families_test.cpp:
// what each format's config says, each feature switched off misses HF, the transformers 4.x
// config layouts give the same logits, tensor parallelism, the CUDA refusal and malformed
// configs / metadata. The checkpoints come from scripts/make_tiny_checkpoints.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/model/rope.h"
#include "engine/model_file_writer.h"
#include "engine_test_util.h"
#include "hf_reference.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "kvattn/kernels/fp8_cache_forms.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;
using test::load_cases;
using test::teacher_forced_error;
using test::error_of;
using test::tiny_dir;

using test::TempDir;

// A copy of tests/data/tiny_<arch> whose config.json is `edit`ed.
template <typename Edit>
void edited_checkpoint(const std::string& arch, const fs::path& dir, Edit edit) {
  fs::copy_file(tiny_dir(arch) + "/model.safetensors", dir / "model.safetensors");
  std::ifstream f(tiny_dir(arch) + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(f);
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

ModelConfig hf_config(const std::string& arch) {
  return config_from_hf_json(tiny_dir(arch) + "/config.json");
}
ModelConfig gguf_config(const std::string& arch) {
  return config_from_gguf(GgufFile::open(tiny_dir(arch) + "/model.gguf"));
}

// ---- what each format's config says ------------------------------------------------------

TEST(GemmaConfig, Gemma2FromBothFormats) {
  const ModelConfig hf = hf_config("gemma2"), gg = gguf_config("gemma2");
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->architecture, "gemma2");
    EXPECT_EQ(c->head_dim, 256);
    EXPECT_EQ(c->activation, ModelConfig::Activation::kGeluTanh);
    EXPECT_TRUE(c->sandwich_norms);
    EXPECT_FALSE(c->qk_norm);
    EXPECT_TRUE(c->tie_word_embeddings);
    EXPECT_NEAR(c->attention_scale, 0.125, 1e-9);  // query_pre_attn_scalar 64
    EXPECT_NEAR(c->attn_logit_softcap, 5.0, 1e-6);
    EXPECT_NEAR(c->final_logit_softcap, 2.0, 1e-6);
    EXPECT_DOUBLE_EQ(c->embedding_scale, std::sqrt(32.0));
    EXPECT_EQ(c->rope_style, ModelConfig::RopeStyle::kRotateHalf);
    EXPECT_EQ(c->rope_local_theta, 0.0);
    EXPECT_EQ(c->window_left(0), 7);  // sliding, window 8
    EXPECT_EQ(c->window_left(1), -1);  // global
  }
  EXPECT_TRUE(hf.norm_weight_offset);   // HF stores w, applies 1 + w
  EXPECT_FALSE(gg.norm_weight_offset);  // the converter stored 1 + w
}

// Gemma 1: Llama's layer with Gemma's GeGLU, (1 + w) norms and embedding scale; the softmax
// scale 1/sqrt(head_dim) (0 = the default), where head_dim 64 is not hidden / heads = 8.
TEST(GemmaConfig, Gemma1FromBothFormats) {
  const ModelConfig hf = hf_config("gemma"), gg = gguf_config("gemma");
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->architecture, "gemma");
    EXPECT_EQ(c->head_dim, 64);
    EXPECT_EQ(c->num_heads, 4);
    EXPECT_EQ(c->num_kv_heads, 2);
    EXPECT_EQ(c->activation, ModelConfig::Activation::kGeluTanh);
    EXPECT_FALSE(c->sandwich_norms);
    EXPECT_FALSE(c->qk_norm);
    EXPECT_TRUE(c->tie_word_embeddings);
    EXPECT_EQ(c->attention_scale, 0.0);
    EXPECT_EQ(c->attn_logit_softcap, 0.0);
    EXPECT_EQ(c->final_logit_softcap, 0.0);
    EXPECT_DOUBLE_EQ(c->embedding_scale, std::sqrt(32.0));
    EXPECT_EQ(c->rope_style, ModelConfig::RopeStyle::kRotateHalf);
    EXPECT_EQ(c->rope_theta, 10000.0);
    EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
    EXPECT_EQ(c->window_left(0), -1);
    EXPECT_EQ(c->window_left(1), -1);
  }
  EXPECT_TRUE(hf.norm_weight_offset);
  EXPECT_FALSE(gg.norm_weight_offset);
}

TEST(GemmaConfig, Gemma3FromBothFormats) {
  const ModelConfig hf = hf_config("gemma3"), gg = gguf_config("gemma3");
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->architecture, "gemma3");
    EXPECT_TRUE(c->qk_norm);
    EXPECT_TRUE(c->sandwich_norms);
    EXPECT_EQ(c->attn_logit_softcap, 0.0);
    EXPECT_EQ(c->final_logit_softcap, 0.0);
    EXPECT_EQ(c->rope_theta, 1e6);
    EXPECT_EQ(c->rope_local_theta, 1e4);
    EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
    EXPECT_EQ(c->rope_scaling.factor, 8.0);
    EXPECT_EQ(c->window_left(0), 7);
    EXPECT_EQ(c->window_left(1), -1);
  }
  // The local table is plain RoPE at 10000; the global one is scaled.
  const std::vector<float> local = rope::local_inv_freq(hf), global = rope::inv_freq(hf);
  EXPECT_EQ(local, rope::inv_freq(ModelConfig{.head_dim = 256, .rope_theta = 1e4}));
  EXPECT_NEAR(global[0], 1.0f / 8.0f, 1e-7);
}

// transformers 4.x wrote no layer_types and Gemma 3's RoPE as rope_theta, rope_local_base_freq
// and a rope_scaling of the global layers; the same model must come out.
TEST(GemmaConfig, Transformers4LayoutsGiveTheSameLogits) {
  TempDir g2, g3;
  edited_checkpoint("gemma2", g2.path(), [](nlohmann::json& c) {
    c.erase("layer_types");  // Gemma 2 alternates, sliding first
    c.erase("rope_parameters");
    c["rope_theta"] = 10000.0;
  });
  edited_checkpoint("gemma3", g3.path(), [](nlohmann::json& c) {
    c.erase("layer_types");
    c.erase("rope_parameters");
    c["sliding_window_pattern"] = 2;
    c["rope_theta"] = 1e6;
    c["rope_local_base_freq"] = 1e4;
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  });
  for (auto [arch, dir] : {std::pair{"gemma2", &g2}, {"gemma3", &g3}}) {
    SCOPED_TRACE(arch);
    ModelWeights w = load_hf_model(dir->path().string());
    EXPECT_EQ(w.config.window_left(0), 7);
    EXPECT_EQ(w.config.window_left(1), -1);
    auto model = Model::create(std::move(w), Device::cpu());
    teacher_forced_error(*model, load_cases(arch), 16, 4096);
  }
  // Gemma 3's default period is 6: two layers are both sliding.
  TempDir d;
  edited_checkpoint("gemma3", d.path(), [](nlohmann::json& c) { c.erase("layer_types"); });
  const ModelConfig c = config_from_hf_json((d.path() / "config.json").string());
  EXPECT_EQ(c.window_left(1), 7);
}

// Configs shaped like the Hub's gemma-2-2b-it and gemma-3-1b-it (transformers 4.4x/4.5x).
TEST(GemmaConfig, HubShapedConfigs) {
  auto parse = [](const nlohmann::json& j) {
    TempDir dir;
    std::ofstream(dir.path() / "config.json") << j.dump();
    return config_from_hf_json((dir.path() / "config.json").string());
  };
  const ModelConfig g2 = parse({{"architectures", {"Gemma2ForCausalLM"}},
                                {"attn_logit_softcapping", 50.0},
                                {"final_logit_softcapping", 30.0},
                                {"eos_token_id", {1, 107}},
                                {"bos_token_id", 2},
                                {"head_dim", 256},
                                {"hidden_act", "gelu_pytorch_tanh"},
                                {"hidden_activation", "gelu_pytorch_tanh"},
                                {"hidden_size", 2304},
                                {"intermediate_size", 9216},
                                {"max_position_embeddings", 8192},
                                {"num_attention_heads", 8},
                                {"num_hidden_layers", 26},
                                {"num_key_value_heads", 4},
                                {"query_pre_attn_scalar", 256},
                                {"rms_norm_eps", 1e-6},
                                {"rope_theta", 10000.0},
                                {"sliding_window", 4096},
                                {"vocab_size", 256000}});
  EXPECT_DOUBLE_EQ(g2.attention_scale, 1.0 / 16);
  EXPECT_EQ(g2.window_left(0), 4095);
  EXPECT_EQ(g2.window_left(25), -1);
  EXPECT_TRUE(g2.tie_word_embeddings);
  EXPECT_EQ(g2.extra_eos_ids, std::vector<int64_t>{107});
  const ModelConfig g3 = parse({{"architectures", {"Gemma3ForCausalLM"}},
                                {"attn_logit_softcapping", nullptr},
                                {"final_logit_softcapping", nullptr},
                                {"eos_token_id", {1, 106}},
                                {"head_dim", 256},
                                {"hidden_activation", "gelu_pytorch_tanh"},
                                {"hidden_size", 1152},
                                {"intermediate_size", 6912},
                                {"max_position_embeddings", 32768},
                                {"model_type", "gemma3_text"},
                                {"num_attention_heads", 4},
                                {"num_hidden_layers", 26},
                                {"num_key_value_heads", 1},
                                {"query_pre_attn_scalar", 256},
                                {"rope_local_base_freq", 10000},
                                {"rope_scaling", nullptr},
                                {"rope_theta", 1000000},
                                {"sliding_window", 512},
                                {"sliding_window_pattern", 6},
                                {"vocab_size", 262144}});
  EXPECT_EQ(g3.attn_logit_softcap, 0.0);
  EXPECT_EQ(g3.final_logit_softcap, 0.0);
  EXPECT_EQ(g3.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(g3.rope_theta, 1e6);
  EXPECT_EQ(g3.rope_local_theta, 1e4);
  int64_t global = 0;
  for (int64_t l = 0; l < 26; ++l) global += g3.window_left(l) < 0;
  EXPECT_EQ(global, 4);  // layers 5, 11, 17, 23
  EXPECT_EQ(g3.window_left(5), -1);
  EXPECT_EQ(g3.window_left(25), 511);
  // gemma-7b (transformers 4.38): hidden_act "gelu" (legacy: the tanh form), head_dim 256
  // where hidden / heads is 192; gemma-1.1-2b-it adds hidden_activation. No window, no caps.
  const nlohmann::json g7 = {{"architectures", {"GemmaForCausalLM"}},
                             {"attention_bias", false},
                             {"bos_token_id", 2},
                             {"eos_token_id", 1},
                             {"head_dim", 256},
                             {"hidden_act", "gelu"},
                             {"hidden_size", 3072},
                             {"intermediate_size", 24576},
                             {"max_position_embeddings", 8192},
                             {"model_type", "gemma"},
                             {"num_attention_heads", 16},
                             {"num_hidden_layers", 28},
                             {"num_key_value_heads", 16},
                             {"pad_token_id", 0},
                             {"rms_norm_eps", 1e-6},
                             {"rope_scaling", nullptr},
                             {"rope_theta", 10000.0},
                             {"vocab_size", 256000}};
  nlohmann::json g2b = g7;
  g2b.update({{"hidden_size", 2048}, {"intermediate_size", 16384}, {"num_attention_heads", 8},
              {"num_hidden_layers", 18}, {"num_key_value_heads", 1},
              {"hidden_activation", "gelu_pytorch_tanh"}});
  nlohmann::json bare = g7;  // GemmaConfig's defaults: head_dim 256, context 8192, tied
  for (const char* k : {"head_dim", "max_position_embeddings", "hidden_act"}) bare.erase(k);
  for (const nlohmann::json* j : std::vector<const nlohmann::json*>{&g7, &g2b, &bare}) {
    const ModelConfig c = parse(*j);
    EXPECT_EQ(c.architecture, "gemma");
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.max_position_embeddings, 8192);
    EXPECT_EQ(c.activation, ModelConfig::Activation::kGeluTanh);
    EXPECT_FALSE(c.sandwich_norms);
    EXPECT_EQ(c.attention_scale, 0.0);
    EXPECT_EQ(c.final_logit_softcap, 0.0);
    EXPECT_EQ(c.window_left(0), -1);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_DOUBLE_EQ(c.embedding_scale, std::sqrt(static_cast<double>(c.hidden_size)));
  }
  EXPECT_EQ(parse(g2b).num_kv_heads, 1);
}

// ---- each feature matters: switched off, the HF reference is missed ------------------------

double error_without(const std::string& arch, const std::string& format, auto&& edit) {
  ModelWeights w = format == "gguf" ? load_gguf_model(tiny_dir(arch) + "/model.gguf")
                                    : load_hf_model(tiny_dir(arch));
  edit(w.config);
  auto model = Model::create(std::move(w), Device::cpu());
  return teacher_forced_error(*model, load_cases(arch), 16, 4096, /*tolerance=*/INFINITY);
}

TEST(GemmaFeatures, EachFeatureChangesTheLogits) {
  using C = ModelConfig;
  const std::vector<std::pair<std::string, std::function<void(C&)>>> g2 = {
      {"attention softcap", [](C& c) { c.attn_logit_softcap = 0; }},
      {"final softcap", [](C& c) { c.final_logit_softcap = 0; }},
      {"query_pre_attn_scalar", [](C& c) { c.attention_scale = 0; }},
      {"window", [](C& c) { c.sliding_window = 0; }},
      {"embedding scale", [](C& c) { c.embedding_scale = 0; }},
      {"GeGLU", [](C& c) { c.activation = C::Activation::kSilu; }},
  };
  for (const auto& [what, edit] : g2) {
    const double e = error_without("gemma2", "safetensors", edit);
    std::printf("[gemma2] without %s: %.3g\n", what.c_str(), e);
    EXPECT_GT(e, 1e-2) << what;
  }
  EXPECT_GT(error_without("gemma2", "safetensors", [](C& c) { c.norm_weight_offset = false; }),
            1e-2);
  // GGUF: the 1 is in the file; adding it again misses.
  EXPECT_GT(error_without("gemma2", "gguf", [](C& c) { c.norm_weight_offset = true; }), 1e-2);
  const std::vector<std::pair<std::string, std::function<void(C&)>>> g3 = {
      {"local rope base", [](C& c) { c.rope_local_theta = 0; }},
      {"global rope scaling", [](C& c) { c.rope_scaling = {}; }},
      {"window", [](C& c) { c.sliding_window = 0; }},
      {"query_pre_attn_scalar", [](C& c) { c.attention_scale = 0; }},
  };
  for (const auto& [what, edit] : g3) {
    const double e = error_without("gemma3", "gguf", edit);
    std::printf("[gemma3] without %s: %.3g\n", what.c_str(), e);
    EXPECT_GT(e, 1e-2) << what;
  }
  // Gemma 1. Its post_attention_layernorm (Llama's MLP input norm) takes the (1 + w) too;
  // model_families_test's HF parity covers that one.
  const std::vector<std::pair<std::string, std::function<void(C&)>>> g1 = {
      {"embedding scale", [](C& c) { c.embedding_scale = 0; }},
      {"GeGLU", [](C& c) { c.activation = C::Activation::kSilu; }},
      {"1/sqrt(head_dim), not 1/sqrt(hidden / heads)",
       [](C& c) { c.attention_scale = 1.0 / std::sqrt(8.0); }},
  };
  for (const auto& [what, edit] : g1) {
    const double e = error_without("gemma", "safetensors", edit);
    std::printf("[gemma] without %s: %.3g\n", what.c_str(), e);
    EXPECT_GT(e, 1e-2) << what;
  }
  EXPECT_GT(error_without("gemma", "safetensors", [](C& c) { c.norm_weight_offset = false; }),
            1e-2);
  EXPECT_GT(error_without("gemma", "gguf", [](C& c) { c.norm_weight_offset = true; }), 1e-2);
}

// ---- tensor parallelism ---------------------------------------------------------------------

// tiny_gemma2 with its one KV head duplicated (two identical KV heads, group 1: the same
// attention), split over two ranks: the sandwich norms, the embedding scale and the final
// soft-cap under tensor parallelism still give HF's logits.
TEST(GemmaParallel, TwoRanksMatchHF) {
  ModelWeights w = load_hf_model(tiny_dir("gemma2"));
  for (int64_t l = 0; l < w.config.num_layers; ++l) {
    for (const char* kv : {"k_proj.weight", "v_proj.weight"}) {
      const std::string name = "model.layers." + std::to_string(l) + ".self_attn." + kv;
      const Tensor& t = w.tensors.at(name);
      Tensor twice = Tensor::empty({2 * t.size(0), t.size(1)}, DType::kF32);
      std::memcpy(twice.ptr<float>(), t.ptr<const float>(), t.numel() * sizeof(float));
      std::memcpy(twice.ptr<float>() + t.numel(), t.ptr<const float>(), t.numel() * sizeof(float));
      w.tensors[name] = std::move(twice);
    }
  }
  w.config.num_kv_heads = 2;
  ModelOptions tp;
  tp.tensor_parallel = 2;
  tp.num_threads = 1;
  auto model = Model::create(std::move(w), Device::cpu(), tp);
  auto cases = load_cases("gemma2");
  cases.resize(3);
  teacher_forced_error(*model, cases, 16, 4096);
}

// tiny_gemma (4 heads, 2 KV heads) split over two ranks as it is: one KV head each.
TEST(GemmaParallel, Gemma1TwoRanksMatchHF) {
  ModelOptions tp;
  tp.tensor_parallel = 2;
  tp.num_threads = 1;
  auto model = Model::create(load_hf_model(tiny_dir("gemma")), Device::cpu(), tp);
  auto cases = load_cases("gemma");
  cases.resize(3);
  teacher_forced_error(*model, cases, 16, 4096);
}

// ---- the GPU model runs Gemma (cuda_gemma.h); what it lacks is refused by name -------------

TEST(GemmaCuda, PassesTheCudaChecks) {
  // A CPU-only build then fails only for the missing backend; a CUDA build creates the model.
  auto create = [](ModelWeights w) { Model::create(std::move(w), Device::cuda(0)); };
  for (const std::string& arch : {"gemma", "gemma2", "gemma3"}) {
    for (const std::string& format : {"safetensors", "gguf"}) {
      const std::string msg = error_of([&] {
        create(format == "gguf" ? load_gguf_model(tiny_dir(arch) + "/model.gguf")
                                : load_hf_model(tiny_dir(arch)));
      });
      EXPECT_TRUE(msg == "(no error)" || msg.find("no CUDA") != std::string::npos)
          << arch << " " << format << ": " << msg;
    }
  }
}

// fp8 KV caches: the CUDA kernels take no window, no soft-cap and no head_dim 256 over them
// until fp8_cache_extended_forms (kvattn/kernels/fp8_cache_forms.h; off by default); each
// refused up front by name (Gemma 2's window first: layer 0 slides).
// fp8 caches for Gemma on CUDA follow the kernels' fp8 forms (fp8_cache_extended_forms): on
// by default, so Model::create accepts them (here without a device it fails only for the
// device); with KVATTN_FP8_EXTENDED_FORMS=0 (or a build without CUDA) each is refused by name.
TEST(GemmaCuda, Fp8CachesFollowTheKernelsForms) {
  ModelOptions fp8;
  fp8.kv_cache_dtype = KVCacheDType::kFP8;
  const bool forms = fp8_cache_extended_forms(Device::cuda(0));
  auto expect = [&](ModelWeights w, const std::string& refusal) {
    const std::string msg =
        test::error_of([&] { Model::create(std::move(w), Device::cuda(0), fp8); });
    if (forms) {
      EXPECT_EQ(msg.find("kv_cache_dtype fp8 with"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find(refusal), std::string::npos) << msg;
    }
  };
  expect(load_hf_model(tiny_dir("gemma2")), "kv_cache_dtype fp8 with sliding_window 8 (layer 0, gemma2)");
  ModelWeights global2 = load_hf_model(tiny_dir("gemma2"));
  global2.config.sliding_window = 0;
  expect(std::move(global2), "kv_cache_dtype fp8 with attention logit softcap 5 (gemma2)");
  ModelWeights global3 = load_gguf_model(tiny_dir("gemma3") + "/model.gguf");
  global3.config.sliding_window = 0;
  expect(std::move(global3),
         "kv_cache_dtype fp8 with head_dim 256 (gemma3) is not supported on cuda:0");
}

// ---- malformed configs and metadata name the field ---------------------------------------

TEST(GemmaConfig, BadHFConfigsNameTheField) {
  auto error_with = [](const std::string& arch, auto edit) {
    TempDir dir;
    edited_checkpoint(arch, dir.path(), edit);
    return error_of([&] { config_from_hf_json((dir.path() / "config.json").string()); });
  };
  auto has = [](const std::string& msg, const std::string& text) {
    EXPECT_NE(msg.find(text), std::string::npos) << "error was: " << msg;
  };
  has(error_with("gemma2", [](auto& c) { c["hidden_activation"] = "gelu"; }),
      "hidden_activation 'gelu' is not supported");
  has(error_with("gemma2", [](auto& c) { c["query_pre_attn_scalar"] = 0; }),
      "query_pre_attn_scalar must be finite and > 0 but is 0");
  has(error_with("gemma2", [](auto& c) { c["attn_logit_softcapping"] = 0.0; }),
      "attn_logit_softcapping must be finite and > 0 (or null) but is 0");
  has(error_with("gemma2", [](auto& c) { c["final_logit_softcapping"] = -1.0; }),
      "final_logit_softcapping must be finite and > 0 (or null) but is -1");
  has(error_with("gemma2", [](auto& c) { c["sliding_window"] = nullptr; }),
      "sliding_window is null but layer_types has sliding_attention layers");
  has(error_with("gemma2", [](auto& c) { c["sliding_window"] = 0; }),
      "sliding_window must lie in [1");
  has(error_with("gemma3",
                 [](auto& c) {
                   c.erase("layer_types");
                   c["sliding_window_pattern"] = 0;
                 }),
      "sliding_window_pattern must lie in [1, 2^20] but is 0");
  has(error_with("gemma3", [](auto& c) { c["layer_types"] = {"sliding_attention"}; }),
      "layer_types must be an array of num_hidden_layers (2)");
  has(error_with("gemma3",
                 [](auto& c) {
                   c["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"},
                                                                {"factor", 2.0}};
                 }),
      "rope_parameters.sliding_attention has rope scaling 'linear'");
  has(error_with("gemma3", [](auto& c) { c["rope_parameters"]["chunked_attention"] = {}; }),
      "rope_parameters.chunked_attention is not a layer type");
  has(error_with("gemma3",
                 [](auto& c) {
                   c["rope_parameters"]["full_attention"] = {{"rope_type", "mrope"}};
                 }),
      "rope scaling type 'mrope' is not supported");
  has(error_with("gemma3", [](auto& c) { c["use_bidirectional_attention"] = true; }),
      "use_bidirectional_attention = true (EmbeddingGemma) is not supported");
  has(error_with("gemma3",
                 [](auto& c) { c["architectures"] = {"Gemma3ForConditionalGeneration"}; }),
      "architecture 'Gemma3ForConditionalGeneration' is not supported");
  has(error_with("gemma3", [](auto& c) { c["num_hidden_layers"] = int64_t{1} << 40; }),
      "num_layers is 1099511627776 but must lie in [1, 4096]");
  // Gemma 1's activation: hidden_act (transformers 5) and hidden_activation (4.x) must both
  // mean GELU's tanh form.
  has(error_with("gemma", [](auto& c) { c["hidden_act"] = "silu"; }),
      "hidden_act 'silu' is not supported (gelu, gelu_pytorch_tanh");
  has(error_with("gemma", [](auto& c) { c["hidden_activation"] = "gelu"; }),
      "hidden_activation 'gelu' is not supported (gelu_pytorch_tanh)");
  has(error_with("gemma", [](auto& c) { c["use_bidirectional_attention"] = true; }),
      "use_bidirectional_attention = true (EmbeddingGemma) is not supported");
  // A tied Gemma without the flag is tied (both configs' default); lm_head is not needed.
  TempDir dir;
  edited_checkpoint("gemma2", dir.path(), [](auto& c) { c.erase("tie_word_embeddings"); });
  EXPECT_TRUE(load_hf_model(dir.path().string()).config.tie_word_embeddings);
}

// A metadata-only gemma GGUF (hidden 8, 2 heads, vocab 4) with `layers` blocks.
testing::GgufBuilder gemma_gguf(const std::string& arch, uint32_t layers) {
  testing::GgufBuilder g;
  g.kv_str("general.architecture", arch)
      .kv_u32(arch + ".embedding_length", 8)
      .kv_u32(arch + ".feed_forward_length", 16)
      .kv_u32(arch + ".block_count", layers)
      .kv_u32(arch + ".attention.head_count", 2)
      .kv_u32(arch + ".attention.head_count_kv", 1)
      .kv_u32(arch + ".attention.key_length", 4)
      .kv_u32(arch + ".attention.value_length", 4)
      .kv_u32(arch + ".attention.sliding_window", 4);
  g.tensor("token_embd.weight", {8, 4}, 0, testing::f32_bytes(std::vector<float>(32, 0.5f)));
  return g;
}

TEST(GemmaConfig, GgufDefaultsAndBadValues) {
  auto open = [](const testing::GgufBuilder& g) {
    TempDir dir;
    const auto path = (dir.path() / "m.gguf").string();
    testing::write_file(path, g.build());
    return config_from_gguf(GgufFile::open(path));
  };
  // llama.cpp's defaults: gemma2 soft-caps 50 / 30, every other layer sliding; the 27B
  // (46 layers) scales by 1/sqrt(hidden / heads), the others by 1/sqrt(head_dim).
  const ModelConfig g2 = open(gemma_gguf("gemma2", 46));
  EXPECT_EQ(g2.attn_logit_softcap, 50.0);
  EXPECT_EQ(g2.final_logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(g2.attention_scale, 0.5);  // 1/sqrt(8 / 2)
  EXPECT_EQ(g2.window_left(0), 3);
  EXPECT_EQ(g2.window_left(1), -1);
  EXPECT_EQ(g2.window_left(44), 3);
  EXPECT_EQ(open(gemma_gguf("gemma2", 4)).attention_scale, 0.0);
  // gemma3: every 6th layer global, local base 10000, no soft-caps.
  const ModelConfig g3 = open(gemma_gguf("gemma3", 12));
  EXPECT_EQ(g3.attn_logit_softcap, 0.0);
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(g3.window_left(l) < 0, l % 6 == 5) << l;
  EXPECT_EQ(g3.rope_local_theta, 10000.0);
  EXPECT_TRUE(g3.qk_norm);
  auto period = gemma_gguf("gemma3", 4);
  period.kv_u32("gemma3.attention.sliding_window_pattern", 2)
      .kv_f32("gemma3.rope.freq_base_swa", 500.0f);
  const ModelConfig p = open(period);
  EXPECT_EQ(p.window_left(1), -1);
  EXPECT_EQ(p.window_left(2), 3);
  EXPECT_EQ(p.rope_local_theta, 500.0);

  auto bad_len = gemma_gguf("gemma3", 4);
  bad_len.kv_i32s("gemma3.attention.sliding_window_pattern", {1, 0, 1});
  EXPECT_ERROR_HAS(open(bad_len), "attention.sliding_window_pattern must be a period or an array "
                                  "of block_count (4) bools");
  auto strings = gemma_gguf("gemma3", 2);
  strings.kv_strs("gemma3.attention.sliding_window_pattern", {"a", "b"});
  EXPECT_ERROR_HAS(open(strings), "sliding_window_pattern must be a period or an array");
  auto scale = gemma_gguf("gemma2", 2);
  scale.kv_f32("gemma2.attention.scale", -1.0f);
  EXPECT_ERROR_HAS(open(scale), "gemma2.attention.scale must be finite and > 0 but is -1");
  auto cap = gemma_gguf("gemma2", 2);
  cap.kv_f32("gemma2.final_logit_softcapping", NAN);
  EXPECT_ERROR_HAS(open(cap), "gemma2.final_logit_softcapping must be finite and >= 0");
  auto huge = gemma_gguf("gemma2", 2);
  huge.kvs.clear();
  huge.kv_str("general.architecture", "gemma2")
      .kv_u32("gemma2.embedding_length", 8)
      .kv_u32("gemma2.feed_forward_length", 16)
      .kv_u32("gemma2.block_count", 1u << 31)
      .kv_u32("gemma2.attention.head_count", 2);
  EXPECT_ERROR_HAS(open(huge), "num_layers is 2147483648 but must lie in [1, 4096]");
}

// llama.cpp's gemma graph reads none of the Gemma 2 keys: a window or a scale in the file is
// ignored, as llama.cpp ignores it.
TEST(GemmaConfig, Gemma1GgufIgnoresGemma2Keys) {
  TempDir dir;
  const auto path = (dir.path() / "m.gguf").string();
  auto g = gemma_gguf("gemma", 2);
  g.kv_f32("gemma.attention.scale", 0.5f).kv_f32("gemma.final_logit_softcapping", 30.0f);
  testing::write_file(path, g.build());
  const ModelConfig c = config_from_gguf(GgufFile::open(path));
  EXPECT_EQ(c.architecture, "gemma");
  EXPECT_EQ(c.window_left(0), -1);
  EXPECT_EQ(c.attention_scale, 0.0);
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  EXPECT_FALSE(c.sandwich_norms);
  EXPECT_FALSE(c.norm_weight_offset);
  EXPECT_DOUBLE_EQ(c.embedding_scale, std::sqrt(8.0));
}

// Gemma 1's GGUF: ffn_norm is its post_attention_layernorm (the MLP's input norm), every norm
// holds 1 + w (convert_hf_to_gguf.py's GemmaModel), and no post_* norm is expected.
TEST(GemmaWeights, Gemma1GgufNormsHoldOnePlusW) {
  const ModelWeights w = load_gguf_model(tiny_dir("gemma") + "/model.gguf");
  const ModelWeights hf = load_hf_model(tiny_dir("gemma"));
  for (const char* n : {"model.layers.1.post_attention_layernorm.weight",
                        "model.layers.0.input_layernorm.weight", "model.norm.weight"}) {
    const Tensor& a = w.tensors.at(n);
    const Tensor& b = hf.tensors.at(n);
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.ptr<const float>()[i], 1.0f + b.ptr<const float>()[i]) << n << " " << i;
    }
  }
  EXPECT_EQ(w.tensors.count("model.layers.0.pre_feedforward_layernorm.weight"), 0u);
  EXPECT_EQ(w.tensors.count("lm_head.weight"), 0u);
}

// GGUF's tensor names: ffn_norm is Gemma's pre-feedforward norm, post_attention_norm and
// post_ffw_norm the sandwich; a missing one is named with its HF name.
TEST(GemmaWeights, GgufSandwichNormsAreMappedAndChecked) {
  ModelWeights w = load_gguf_model(tiny_dir("gemma2") + "/model.gguf");
  const ModelWeights hf = load_hf_model(tiny_dir("gemma2"));
  for (const char* n : {"post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
                        "post_feedforward_layernorm.weight", "input_layernorm.weight"}) {
    const std::string name = std::string("model.layers.1.") + n;
    const Tensor& a = w.tensors.at(name);
    const Tensor& b = hf.tensors.at(name);
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.ptr<const float>()[i], 1.0f + b.ptr<const float>()[i]) << name << " " << i;
    }
  }
  w.tensors.erase("model.layers.1.post_feedforward_layernorm.weight");
  EXPECT_ERROR_HAS(validate_weights(w, "x"),
                   "tensor 'model.layers.1.post_feedforward_layernorm.weight' is missing");
}

}  // namespace
}  // namespace kvattn
