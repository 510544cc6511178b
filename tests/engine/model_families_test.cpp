// The model families of issue 19 against HF transformers, from HF safetensors and from GGUF:
//   tiny_llama3  -- rope_scaling llama3 (GGUF: llama.cpp's rope_freqs tensor), tied embeddings;
//   tiny_qwen2   -- q/k/v biases, YaRN (GGUF arch qwen2, attn_q.bias, rope.scaling.* keys);
//   tiny_mistral -- sliding window 8 on every layer (GGUF arch llama, attention.sliding_window);
//   tiny_llama with linear and dynamic-NTK scaling (HF logits in expected_rope_*.json);
//   tiny_gemma2  -- head_dim 256, query_pre_attn_scalar 64, attention and final logit
//                   soft-capping, sliding/global layers, sandwich norms (1 + w), GeGLU,
//                   embedding scale, tied (GGUF arch gemma2);
//   tiny_gemma3  -- q/k norms, a local RoPE base on the sliding layer, linear scaling on the
//                   global one (GGUF arch gemma3, attention.sliding_window_pattern);
//   tiny_gemma   -- Gemma 1: GQA 4/2 with head_dim 64 (hidden / heads = 8), GeGLU, (1 + w)
//                   on Llama's two norms a layer, embedding scale, tied, hidden_act "gelu"
//                   (GGUF arch gemma, norms + 1).
// The checkpoints, GGUF files and HF logits come from scripts/make_tiny_checkpoints.py. Each
// feature is also switched off once to show the reference depends on it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/model/rope.h"
#include "engine/model_file_writer.h"
#include "engine_test_util.h"
#include "hf_reference.h"
#include "kvattn/engine/llm.h"
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

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// A copy of tests/data/tiny_<arch> whose config.json is `edit`ed.
template <typename Edit>
void edited_checkpoint(const std::string& arch, const fs::path& dir, Edit edit) {
  fs::copy_file(tiny_dir(arch) + "/model.safetensors", dir / "model.safetensors");
  nlohmann::json cfg = read_json(tiny_dir(arch) + "/config.json");
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

ModelWeights load(const std::string& arch, const std::string& format) {
  return format == "gguf" ? load_gguf_model(tiny_dir(arch) + "/model.gguf")
                          : load_hf_model(tiny_dir(arch));
}

// ---- HF parity: every family from both formats ------------------------------------------

class Family : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string arch() const { return std::get<0>(GetParam()); }
  std::string format() const { return std::get<1>(GetParam()); }
};

TEST_P(Family, LogitsMatchHFThroughThePagedCache) {
  const auto cases = load_cases(arch());
  auto model = Model::create(load(arch(), format()), Device::cpu());
  for (auto [bs, chunk] : {std::pair<int64_t, int64_t>{16, 4096}, {1, 4096}, {7, 5}}) {
    SCOPED_TRACE("block " + std::to_string(bs) + " chunk " + std::to_string(chunk));
    const double worst = teacher_forced_error(*model, cases, bs, chunk);
    std::printf("[%s %s] block %lld chunk %lld: max relative logit error vs HF %.2e\n",
                arch().c_str(), format().c_str(), static_cast<long long>(bs),
                static_cast<long long>(chunk), worst);
  }
}

TEST_P(Family, LLMGreedyTokensMatchHF) {
  const auto cases = load_cases(arch());
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : cases) prompts.push_back(c.prompt);
  SamplingParams sp;
  sp.max_tokens = static_cast<int>(cases[0].greedy.size());
  sp.ignore_eos = true;
  LLMOptions opt;
  opt.kv_cache_bytes = 1 << 20;
  LLM llm(load(arch(), format()), std::nullopt, opt);
  const auto outs = llm.generate(prompts, sp);
  ASSERT_EQ(outs.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "prompt " << i;
  }
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0) << "blocks leaked";
}

INSTANTIATE_TEST_SUITE_P(HF, Family,
                         ::testing::Combine(::testing::Values("llama3", "qwen2", "mistral",
                                                              "gemma", "gemma2", "gemma3"),
                                            ::testing::Values("safetensors", "gguf")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// ---- what each format's config says ------------------------------------------------------

TEST(FamilyConfig, Llama3ScalingFromHFAndFromGgufGiveTheSameFrequencies) {
  const ModelConfig hf = config_from_hf_json(tiny_dir("llama3") + "/config.json");
  EXPECT_EQ(hf.architecture, "llama");
  EXPECT_EQ(hf.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(hf.rope_scaling.factor, 8.0);
  EXPECT_EQ(hf.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(hf.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(hf.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_TRUE(hf.tie_word_embeddings);
  EXPECT_EQ(hf.rope_theta, 500000.0);

  const ModelConfig gg = config_from_gguf(GgufFile::open(tiny_dir("llama3") + "/model.gguf"));
  EXPECT_EQ(gg.rope_scaling.type, RopeScaling::Type::kNone);  // llama.cpp: the tensor instead
  ASSERT_EQ(gg.rope_freq_factors.size(), 32u);
  EXPECT_TRUE(gg.tie_word_embeddings);
  EXPECT_EQ(gg.rope_style, ModelConfig::RopeStyle::kInterleaved);
  const std::vector<float> a = rope::inv_freq(hf), b = rope::inv_freq(gg);
  const std::vector<float> plain = rope::inv_freq(ModelConfig{.head_dim = 64, .rope_theta = 5e5});
  ASSERT_EQ(a.size(), 32u);
  int scaled = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-6 * a[i]) << "pair " << i;
    scaled += std::abs(a[i] - plain[i]) > 1e-3f * plain[i];
  }
  EXPECT_GT(scaled, 16) << "the checkpoint should stretch most frequencies";
}

TEST(FamilyConfig, Qwen2BiasesAndYarn) {
  for (const ModelConfig& c :
       {config_from_hf_json(tiny_dir("qwen2") + "/config.json"),
        config_from_gguf(GgufFile::open(tiny_dir("qwen2") + "/model.gguf"))}) {
    EXPECT_EQ(c.architecture, "qwen2");
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_FALSE(c.o_bias);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.rope_style, ModelConfig::RopeStyle::kRotateHalf);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32);
    EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
    EXPECT_EQ(c.window_left(0), -1);
  }
}

TEST(FamilyConfig, MistralWindowFromBothFormats) {
  const ModelConfig hf = config_from_hf_json(tiny_dir("mistral") + "/config.json");
  const ModelConfig gg = config_from_gguf(GgufFile::open(tiny_dir("mistral") + "/model.gguf"));
  EXPECT_EQ(hf.architecture, "mistral");
  EXPECT_EQ(gg.architecture, "llama");
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->sliding_window, 8);
    EXPECT_EQ(c->window_left(0), 7);  // HF: keys j > i - 8 => flash-attn's left = 7
    EXPECT_EQ(c->window_left(1), 7);
  }
}

// ---- each feature matters: switched off, the HF reference is missed ------------------------

double error_without(const std::string& arch, auto&& edit) {
  ModelWeights w = load_hf_model(tiny_dir(arch));
  edit(w);
  auto model = Model::create(std::move(w), Device::cpu());
  return teacher_forced_error(*model, load_cases(arch), 16, 4096, /*tolerance=*/INFINITY);
}

TEST(FamilyFeatures, EachFeatureChangesTheLogits) {
  EXPECT_GT(error_without("llama3", [](ModelWeights& w) { w.config.rope_scaling = {}; }), 1e-2);
  EXPECT_GT(error_without("qwen2", [](ModelWeights& w) { w.config.rope_scaling = {}; }), 1e-2);
  EXPECT_GT(error_without("qwen2",
                          [](ModelWeights& w) {
                            for (auto& [name, t] : w.tensors) {
                              if (name.ends_with("_proj.bias")) {
                                std::fill_n(t.ptr<float>(), t.numel(), 0.0f);
                              }
                            }
                          }),
            1e-2);
  EXPECT_GT(error_without("mistral", [](ModelWeights& w) { w.config.sliding_window = 0; }), 1e-2);
}

// ---- linear and dynamic-NTK scaling on tiny_llama's weights --------------------------------

// The config changes recorded in expected_rope_<kind>.json, applied to tiny_llama's config.
void rope_variant(const std::string& kind, const fs::path& dir) {
  const nlohmann::json meta = read_json(tiny_dir("llama") + "/expected_rope_" + kind + ".json");
  edited_checkpoint("llama", dir, [&](nlohmann::json& cfg) {
    for (const auto& [key, value] : meta.at("config").items()) cfg[key] = value;
  });
}

TEST(RopeScaling, LinearMatchesHF) {
  TempDir dir;
  rope_variant("linear", dir.path());
  ModelWeights w = load_hf_model(dir.path().string());
  EXPECT_EQ(w.config.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(w.config.rope_scaling.factor, 4.0);
  auto model = Model::create(std::move(w), Device::cpu());
  const auto cases = load_cases("llama", "expected_rope_linear.json");
  for (int64_t chunk : {4096, 5}) teacher_forced_error(*model, cases, 16, chunk);
}

// HF's dynamic NTK recomputes the frequencies from the sequence's length at each forward and
// never re-rotates cached keys; the engine does the same per sequence when a prompt is
// prefilled in one step (chunked prefill would rotate earlier chunks with shorter lengths).
TEST(RopeScaling, DynamicNtkMatchesHFsCachedGenerate) {
  TempDir dir;
  rope_variant("dynamic", dir.path());
  ModelWeights w = load_hf_model(dir.path().string());
  EXPECT_EQ(w.config.rope_scaling.type, RopeScaling::Type::kDynamic);
  EXPECT_EQ(w.config.max_position_embeddings, 16);
  auto model = Model::create(std::move(w), Device::cpu());
  const auto cases = load_cases("llama", "expected_rope_dynamic.json");
  for (int64_t bs : {16, 1}) teacher_forced_error(*model, cases, bs, 4096);
  // Within max_position_embeddings dynamic equals plain RoPE.
  ModelConfig c = model->config();
  EXPECT_EQ(rope::inv_freq(c, 16), rope::inv_freq(ModelConfig{.head_dim = 64}));
  EXPECT_NE(rope::inv_freq(c, 17), rope::inv_freq(ModelConfig{.head_dim = 64}));
}

// vLLM's context rule: a RoPE scaling made to extend the context extends it (linear and dynamic
// from max_position_embeddings, yarn from its original context); llama3 / longrope configs
// already state the extended length; factors <= 1 shrink nothing.
TEST(RopeScaling, ScaledContextLength) {
  ModelConfig c;
  c.max_position_embeddings = 4096;
  EXPECT_EQ(scaled_context_length(c), 4096);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 4.0;
  EXPECT_EQ(scaled_context_length(c), 16384);
  c.rope_scaling.type = RopeScaling::Type::kDynamic;
  c.rope_scaling.factor = 2.5;
  EXPECT_EQ(scaled_context_length(c), 10240);
  c.rope_scaling.type = RopeScaling::Type::kYarn;  // Qwen2.5's 128k recipe
  c.max_position_embeddings = 32768;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 32768;
  EXPECT_EQ(scaled_context_length(c), 131072);
  c.rope_scaling.original_max_position_embeddings = 4096;  // DeepSeek-style: 4096 x 40
  c.rope_scaling.factor = 40.0;
  c.max_position_embeddings = 163840;
  EXPECT_EQ(scaled_context_length(c), 163840);
  c.rope_scaling.factor = 0.5;
  EXPECT_EQ(scaled_context_length(c), 163840);
  for (auto t : {RopeScaling::Type::kLlama3, RopeScaling::Type::kLongRope}) {
    c.rope_scaling.type = t;
    c.rope_scaling.factor = 8.0;
    EXPECT_EQ(scaled_context_length(c), 163840);
  }
  c.max_position_embeddings = 0;
  EXPECT_EQ(scaled_context_length(c), 0);
}

// The LLM takes that context: tiny_llama with dynamic NTK (max_position_embeddings 16, factor
// 2) runs a 20-token prompt to 32 tokens and refuses a 33-token one, naming the context.
TEST(RopeScaling, TheEngineTakesTheScaledContext) {
  TempDir dir;
  rope_variant("dynamic", dir.path());
  LLMOptions opt;
  opt.kv_cache_bytes = 1 << 20;
  LLM llm(load_hf_model(dir.path().string()), std::nullopt, opt);
  EXPECT_EQ(llm.max_model_len(), 32);
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + 7 * i % 300);
  const auto out = llm.generate({prompt}, sp);
  EXPECT_EQ(out[0].token_ids.size(), 12u);
  prompt.resize(33, 5);
  EXPECT_ERROR_HAS(llm.generate({prompt}, sp), "the context (ctx_size, --ctx-size) is 32");
  llm.check_kv_cache_idle();
}

// ---- biases under tensor parallelism ------------------------------------------------------

// tiny_llama with random q/k/v/o biases (Llama attention_bias = true): two ranks, which split
// the q/k/v biases with their heads and add the replicated o_proj bias after the all-reduce,
// give the logits of one.
TEST(Biases, TensorParallelSplitsThem) {
  auto with_biases = [] { return test::llama_with_biases(); };
  auto one = Model::create(with_biases(), Device::cpu());
  ModelOptions tp;
  tp.tensor_parallel = 2;
  tp.num_threads = 1;
  auto two = Model::create(with_biases(), Device::cpu(), tp);
  // Reference: the one-rank model's own logits, via a first run.
  auto cases = load_cases("llama");
  cases.resize(3);
  one->allocate_kv_cache(64, 16);
  two->allocate_kv_cache(64, 16);
  const int64_t vocab = one->config().vocab_size;
  for (const auto& c : cases) {
    BlockManager bm1(64, 16, false), bm2(64, 16, false);
    Sequence s1(0, c.prompt), s2(0, c.prompt);
    bm1.allocate(s1);
    bm2.allocate(s2);
    BatchMetadataBuilder b1(bm1), b2(bm2);
    const std::vector<ScheduledSequence> q1 = {{&s1, s1.num_uncomputed_tokens()}};
    const std::vector<ScheduledSequence> q2 = {{&s2, s2.num_uncomputed_tokens()}};
    const BatchMetadata& m1 = b1.build(q1);
    const BatchMetadata& m2 = b2.build(q2);
    std::vector<int32_t> rows = {static_cast<int32_t>(c.prompt.size() - 1)};
    std::vector<float> l1(vocab), l2(vocab);
    auto input = [&](const BatchMetadata& m) {
      ModelInput in;
      in.token_ids = {m.token_ids.ptr<const int32_t>(), static_cast<size_t>(m.num_tokens)};
      in.positions = {m.positions.ptr<const int32_t>(), static_cast<size_t>(m.num_tokens)};
      in.logit_rows = rows;
      in.ctx = &m.ctx;
      return in;
    };
    one->forward(input(m1), l1);
    two->forward(input(m2), l2);
    std::vector<float> ref(l1.begin(), l1.end());
    EXPECT_LT(test::max_rel_error(l2.data(), ref), 1e-5) << "prompt of " << c.prompt.size();
    // ...and the biases are there: the plain tiny_llama differs.
    EXPECT_GT(test::max_rel_error(l1.data(), load_cases("llama")[&c - cases.data()].logits[0]),
              1e-2);
  }
}

// ---- the GPU model's checks: the families pass, what it lacks is refused by name ------------

// Model::create on cuda:0 gets past the architecture checks (before anything reaches a
// device): it builds the model on a GPU machine, or fails only for the missing device (a
// CPU-only build, or no visible GPU). engine_model_families_gpu_test runs them on the GPU.
TEST(FamilyCuda, TheFamiliesPassTheCudaChecks) {
  auto create = [](ModelWeights w) { Model::create(std::move(w), Device::cuda(0)); };
  for (const std::string& arch : {"mistral", "qwen2", "llama3"}) {
    for (const std::string& format : {"safetensors", "gguf"}) {
      const std::string msg = error_of([&] { create(load(arch, format)); });
      EXPECT_TRUE(msg == "(no error)" || msg.find("no CUDA") != std::string::npos)
          << arch << " " << format << ": " << msg;
    }
  }
}

TEST(FamilyCuda, WhatTheGpuLacksIsRefusedByName) {
  ModelOptions fp8;
  fp8.kv_cache_dtype = KVCacheDType::kFP8;
  // An fp8 cache with a window follows the kernels' fp8 forms (on by default since session 31;
  // without a device Model::create then fails only for the device).
  const std::string msg = error_of(
      [&] { Model::create(load_hf_model(tiny_dir("mistral")), Device::cuda(0), fp8); });
  if (fp8_cache_extended_forms(Device::cuda(0))) {
    EXPECT_EQ(msg.find("kv_cache_dtype fp8 with"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("kv_cache_dtype fp8 with sliding_window 8 (layer 0, mistral)"),
              std::string::npos)
        << msg;
  }
  ModelWeights dyn = load(std::string("llama3"), "gguf");  // rope_freqs factors
  ASSERT_FALSE(dyn.config.rope_freq_factors.empty());
  dyn.config.rope_scaling.type = RopeScaling::Type::kDynamic;
  dyn.config.rope_scaling.factor = 2.0;
  EXPECT_ERROR_HAS(Model::create(std::move(dyn), Device::cuda(0)),
                   "rope scaling 'dynamic' together with rope_freqs factors");
}

// ---- malformed configs and metadata name the field ---------------------------------------

TEST(FamilyConfig, BadHFConfigsNameTheField) {
  auto error_with = [](const std::string& arch, auto edit) {
    TempDir dir;
    edited_checkpoint(arch, dir.path(), edit);
    return error_of([&] { config_from_hf_json((dir.path() / "config.json").string()); });
  };
  auto has = [](const std::string& msg, const std::string& text) {
    EXPECT_NE(msg.find(text), std::string::npos) << "wanted: " << text << "\nerror was: " << msg;
  };
  has(error_with("llama3", [](auto& c) { c["rope_parameters"]["rope_type"] = "mrope"; }),
      "rope scaling type 'mrope' is not supported");
  // LongRoPE is read for any architecture (HF's rope functions are shared); it needs its lists.
  has(error_with("llama3", [](auto& c) { c["rope_parameters"]["rope_type"] = "longrope"; }),
      "short_factor");
  has(error_with("llama3", [](auto& c) { c["rope_parameters"].erase("low_freq_factor"); }),
      "low_freq_factor");
  has(error_with("llama3", [](auto& c) { c["rope_parameters"]["factor"] = -2.0; }),
      "factor must be finite and > 0 but is -2");
  has(error_with("llama3",
                 [](auto& c) { c["rope_parameters"]["high_freq_factor"] = 1.0; }),
      "must be finite, > 0 and different");
  has(error_with("qwen2", [](auto& c) { c["rope_parameters"]["beta_fast"] = -1.0; }),
      "beta_fast -1");
  has(error_with("qwen2",
                 [](auto& c) {
                   c["rope_parameters"]["original_max_position_embeddings"] = 0;
                   c["rope_parameters"]["factor"] = 2.0;
                 }),
      "original_max_position_embeddings must lie in [1");
  has(error_with("qwen2", [](auto& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.5; }),
      "partial_rotary_factor is 0.5");
  // 4.x rope_scaling wins over rope_parameters and is read the same way.
  has(error_with("llama3",
                 [](auto& c) { c["rope_scaling"] = {{"type", "mrope"}, {"factor", 2.0}}; }),
      "rope scaling type 'mrope'");
  has(error_with("mistral", [](auto& c) { c["sliding_window"] = 0; }),
      "sliding_window must lie in [1");
  has(error_with("qwen2",
                 [](auto& c) {
                   c["use_sliding_window"] = true;
                   c["sliding_window"] = 4;
                   c["layer_types"] = {"sliding_attention"};
                 }),
      "layer_types must be an array of num_hidden_layers (2)");
  has(error_with("qwen2",
                 [](auto& c) {
                   c["use_sliding_window"] = true;
                   c["sliding_window"] = 4;
                   c["layer_types"] = {"sliding_attention", "chunked_attention"};
                 }),
      "layer_types[1] is 'chunked_attention'");
  has(error_with("llama3", [](auto& c) { c["mlp_bias"] = true; }), "mlp_bias = true");
  has(error_with("llama3", [](auto& c) { c["architectures"] = {"Phi3SmallForCausalLM"}; }),
      "architecture 'Phi3SmallForCausalLM' is not supported");
}

TEST(FamilyConfig, QwenSlidingLayersFollowMaxWindowLayersOrLayerTypes) {
  TempDir a, b;
  edited_checkpoint("qwen2", a.path(), [](auto& c) {
    c.erase("layer_types");
    c["use_sliding_window"] = true;
    c["sliding_window"] = 16;
    c["max_window_layers"] = 1;
  });
  const ModelConfig ca = config_from_hf_json((a.path() / "config.json").string());
  EXPECT_EQ(ca.window_left(0), -1);
  EXPECT_EQ(ca.window_left(1), 15);
  edited_checkpoint("qwen2", b.path(), [](auto& c) {
    c["use_sliding_window"] = true;
    c["sliding_window"] = 16;
    c["layer_types"] = {"sliding_attention", "full_attention"};
  });
  const ModelConfig cb = config_from_hf_json((b.path() / "config.json").string());
  EXPECT_EQ(cb.window_left(0), 15);
  EXPECT_EQ(cb.window_left(1), -1);
  // use_sliding_window false: Qwen2.5's shipped sliding_window value is ignored.
  TempDir d;
  edited_checkpoint("qwen2", d.path(), [](auto& c) { c["sliding_window"] = 32768; });
  EXPECT_EQ(config_from_hf_json((d.path() / "config.json").string()).sliding_window, 0);
}

TEST(FamilyConfig, GgufRopeScalingKeysAndBadValues) {
  using testing::GgufBuilder;
  testing::TinyShape s;
  auto open = [&](GgufBuilder g) {
    TempDir dir;
    const auto path = (dir.path() / "m.gguf").string();
    testing::write_file(path, g.build());
    return config_from_gguf(GgufFile::open(path));
  };
  GgufBuilder lin = testing::tiny_gguf(s, nullptr);
  lin.kv_str("llama.rope.scaling.type", "linear").kv_f32("llama.rope.scaling.factor", 2.0f);
  const ModelConfig c = open(lin);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);

  GgufBuilder yarn = testing::tiny_gguf(s, nullptr);
  yarn.kv_str("llama.rope.scaling.type", "yarn")
      .kv_f32("llama.rope.scaling.factor", 4.0f)
      .kv_u32("llama.rope.scaling.original_context_length", 64)
      .kv_f32("llama.rope.scaling.attn_factor", 0.5f);
  const ModelConfig y = open(yarn);
  EXPECT_EQ(y.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_NEAR(y.rope_scaling.attention_factor, 0.5 * (1 + 0.1 * std::log(4.0)), 1e-7);

  GgufBuilder bad_type = testing::tiny_gguf(s, nullptr);
  bad_type.kv_str("llama.rope.scaling.type", "longrope");
  EXPECT_ERROR_HAS(open(bad_type), "rope.scaling.type 'longrope' is not supported");
  GgufBuilder no_factor = testing::tiny_gguf(s, nullptr);
  no_factor.kv_str("llama.rope.scaling.type", "linear");
  EXPECT_ERROR_HAS(open(no_factor), "factor must be finite and > 0 but is 0");
  GgufBuilder no_ctx = testing::tiny_gguf(s, nullptr);
  no_ctx.kv_str("llama.rope.scaling.type", "yarn").kv_f32("llama.rope.scaling.factor", 4.0f);
  EXPECT_ERROR_HAS(open(no_ctx), "original_max_position_embeddings must lie in [1");

  const int64_t half = s.head_dim / 2;
  GgufBuilder freqs = testing::tiny_gguf(s, nullptr);
  freqs.tensor("rope_freqs.weight", {static_cast<uint64_t>(half + 1)}, 0,
               testing::f32_bytes(std::vector<float>(half + 1, 1.0f)));
  EXPECT_ERROR_HAS(open(freqs), "tensor 'rope_freqs.weight' must be 1-D with rotary dims / 2");
  GgufBuilder neg = testing::tiny_gguf(s, nullptr);
  std::vector<float> f(half, 1.0f);
  f[3] = -1.0f;
  neg.tensor("rope_freqs.weight", {static_cast<uint64_t>(half)}, 0, testing::f32_bytes(f));
  EXPECT_ERROR_HAS(open(neg), "rope_freqs.weight[3] must be finite and > 0 but is -1");
  GgufBuilder win = testing::tiny_gguf(s, nullptr);
  win.kv_i32("llama.attention.sliding_window", -4);
  EXPECT_ERROR_HAS(open(win), "sliding_window is -4");
}

// A GGUF whose layer 0 has q/k/v biases needs them in every layer, shaped like the weights.
TEST(FamilyConfig, GgufBiasesAreCheckedPerLayer) {
  ModelWeights w = load_gguf_model(tiny_dir("qwen2") + "/model.gguf");
  EXPECT_EQ(w.tensors.at("model.layers.1.self_attn.k_proj.bias").numel(), 64);
  w.tensors.erase("model.layers.1.self_attn.v_proj.bias");
  EXPECT_ERROR_HAS(validate_weights(w, "x"), "tensor 'model.layers.1.self_attn.v_proj.bias' is missing");
  w.tensors["model.layers.1.self_attn.v_proj.bias"] = Tensor::empty({63}, DType::kF32);
  EXPECT_ERROR_HAS(validate_weights(w, "x"), "has shape [63] but the config needs [64]");
}

}  // namespace
}  // namespace kvattn
