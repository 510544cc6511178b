// Phi-3 (Phi3ForCausalLM / GGUF arch phi3) against HF transformers, from HF safetensors and from
// GGUF: tests/data/tiny_phi3 (scripts/make_tiny_checkpoints.py --families phi3 phi4mini) has
// fused qkv_proj / gate_up_proj, LongRoPE short and long factors over an original context of 32
// in 128 positions, and a window of 16; tiny_phi4mini is Phi-4-mini's shape: half of each
// head's dims rotate (partial_rotary_factor 0.5), tied embeddings, no window. HF picks the factor list per forward pass by the
// sequence's length, so its logits of the 1- and 7-token prompts (at most 15 positions) used
// the short factors and those of the 33- and 70-token prompts the long ones; the engine picks
// one list for its whole context (LLMEngine: the long one when ctx_size exceeds 32).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/rope.h"
#include "engine/model_file_writer.h"
#include "engine_test_util.h"
#include "hf_reference.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/safetensors.h"
#include "kvattn/engine/weights.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;
using test::Case;
using test::load_cases;
using test::teacher_forced_error;
using test::TempDir;
using test::error_of;
using test::tiny_dir;

constexpr int64_t kOriginal = 32;

ModelWeights load(const std::string& format, const std::string& arch = "phi3") {
  return format == "gguf" ? load_gguf_model(tiny_dir(arch) + "/model.gguf")
                          : load_hf_model(tiny_dir(arch));
}

// The cases whose whole sequence (prompt and HF's new tokens) fits the original context: HF
// rotated them with the short factors. The others it rotated with the long ones.
std::vector<Case> cases_on(bool long_side, const std::string& arch = "phi3") {
  std::vector<Case> out;
  for (const Case& c : load_cases(arch)) {
    const bool fits = static_cast<int64_t>(c.prompt.size() + c.greedy.size()) <= kOriginal;
    if (fits != long_side) out.push_back(c);
  }
  EXPECT_EQ(out.size(), 2u);
  return out;
}

std::vector<float> read_floats(const Tensor& t) {
  const Tensor f = widen_to_f32(t);
  return {f.ptr<const float>(), f.ptr<const float>() + f.numel()};
}

TEST(Phi3Config, BothFormatsReadTheSameModel) {
  const ModelConfig hf = config_from_hf_json(tiny_dir("phi3") + "/config.json");
  const ModelConfig gg = config_from_gguf(GgufFile::open(tiny_dir("phi3") + "/model.gguf"));
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->architecture, "phi3");
    EXPECT_EQ(c->head_dim, 64);
    EXPECT_EQ(c->num_kv_heads, 1);
    EXPECT_EQ(c->max_position_embeddings, 128);
    EXPECT_EQ(c->rope_style, ModelConfig::RopeStyle::kRotateHalf);
    EXPECT_FALSE(c->qkv_bias || c->o_bias || c->qk_norm || c->tie_word_embeddings);
    EXPECT_EQ(c->window_left(0), 15);  // HF's sliding_window 16: keys j > i - 16
    EXPECT_EQ(c->window_left(1), 15);
    const RopeScaling& s = c->rope_scaling;
    EXPECT_EQ(s.type, RopeScaling::Type::kLongRope);
    EXPECT_EQ(s.original_max_position_embeddings, kOriginal);
    // sqrt(1 + ln(128 / 32) / ln(32)); the GGUF holds it as float32.
    EXPECT_NEAR(s.attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(32.0)), 1e-6);
    ASSERT_EQ(s.short_factor.size(), 32u);
    ASSERT_EQ(s.long_factor.size(), 32u);
    EXPECT_FALSE(s.use_long_factors);  // the engine decides
  }
  EXPECT_EQ(hf.rope_scaling.short_factor, gg.rope_scaling.short_factor);
  EXPECT_EQ(hf.rope_scaling.long_factor, gg.rope_scaling.long_factor);
  EXPECT_NEAR(rope::attention_factor(hf), 1.18322, 1e-5);

  // inv_freq[i] = 1 / (factor[i] * 10000^(2i / 64)), from the list in use.
  ModelConfig c = hf;
  for (bool use_long : {false, true}) {
    c.rope_scaling.use_long_factors = use_long;
    const std::vector<float> f = rope::inv_freq(c);
    const std::vector<float>& ext = use_long ? c.rope_scaling.long_factor : c.rope_scaling.short_factor;
    ASSERT_EQ(f.size(), 32u);
    for (size_t i = 0; i < f.size(); ++i) {
      const double want = 1.0 / (ext[i] * std::pow(10000.0, 2.0 * static_cast<double>(i) / 64));
      EXPECT_NEAR(f[i], want, 1e-6 * want) << "pair " << i << (use_long ? " long" : " short");
    }
  }
}

// The fused tensors become the separate HF names, row for row: qkv_proj = q, k, v and
// gate_up_proj = gate, up (HF's chunk(2)).
TEST(Phi3Weights, FusedProjectionsSplitRowForRow) {
  const SafetensorsFile file = SafetensorsFile::open(tiny_dir("phi3") + "/model.safetensors");
  auto fused = [&](const std::string& name) {
    for (const auto& t : file.tensors()) {
      if (t.name == name) return read_floats(file.to_f32(t));
    }
    ADD_FAILURE() << "no tensor " << name;
    return std::vector<float>{};
  };
  for (const char* format : {"safetensors", "gguf"}) {
    SCOPED_TRACE(format);
    const ModelWeights w = load(format);
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      EXPECT_EQ(w.tensors.count(p + "self_attn.qkv_proj.weight"), 0u);
      EXPECT_EQ(w.tensors.count(p + "mlp.gate_up_proj.weight"), 0u);
      std::vector<float> qkv, gate_up;
      for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        const auto v = read_floats(w.tensors.at(p + "self_attn." + part + ".weight"));
        qkv.insert(qkv.end(), v.begin(), v.end());
      }
      for (const char* part : {"gate_proj", "up_proj"}) {
        const auto v = read_floats(w.tensors.at(p + "mlp." + part + ".weight"));
        gate_up.insert(gate_up.end(), v.begin(), v.end());
      }
      EXPECT_EQ(qkv, fused(p + "self_attn.qkv_proj.weight"));
      EXPECT_EQ(gate_up, fused(p + "mlp.gate_up_proj.weight"));
    }
  }
}

// ---- HF parity -------------------------------------------------------------------------------

class Phi3Format : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string arch() const { return std::get<0>(GetParam()); }
  std::string format() const { return std::get<1>(GetParam()); }
  ModelWeights weights() const { return load(format(), arch()); }
};

TEST_P(Phi3Format, LogitsMatchHFWithEachFactorList) {
  for (bool use_long : {false, true}) {
    ModelWeights w = weights();
    w.config.rope_scaling.use_long_factors = use_long;
    auto model = Model::create(std::move(w), Device::cpu());
    const auto cases = cases_on(use_long, arch());
    for (auto [bs, chunk] : {std::pair<int64_t, int64_t>{16, 4096}, {1, 4096}, {7, 5}}) {
      SCOPED_TRACE(std::string(use_long ? "long" : "short") + " factors, block " +
                   std::to_string(bs) + " chunk " + std::to_string(chunk));
      const double worst = teacher_forced_error(*model, cases, bs, chunk);
      std::printf("[%s %s, %s factors] block %lld chunk %lld: max relative logit error vs HF "
                  "%.2e\n",
                  arch().c_str(), format().c_str(), use_long ? "long" : "short",
                  static_cast<long long>(bs), static_cast<long long>(chunk), worst);
    }
  }
}

// The engine's context picks the list: by default the original context (32 tokens, short
// factors), with --ctx-size 128 the long ones; each gives HF's greedy tokens on its side.
TEST_P(Phi3Format, LLMPicksTheFactorsByItsContext) {
  SamplingParams sp;
  sp.ignore_eos = true;
  for (auto [ctx, use_long] : {std::pair<int64_t, bool>{0, false}, {128, true}}) {
    const auto cases = cases_on(use_long, arch());
    sp.max_tokens = static_cast<int>(cases[0].greedy.size());
    LLMOptions opt;
    opt.kv_cache_bytes = 1 << 20;
    opt.ctx_size = ctx;
    LLM llm(weights(), std::nullopt, opt);
    EXPECT_EQ(llm.max_model_len(), use_long ? 128 : kOriginal);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& c : cases) prompts.push_back(c.prompt);
    const auto outs = llm.generate(prompts, sp);
    ASSERT_EQ(outs.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "ctx " << ctx << " prompt " << i;
    }
    EXPECT_EQ(llm.cache_stats().num_used_blocks, 0) << "blocks leaked";
  }
  // A context of the original length still takes the short list; one token more, the long.
  for (auto [ctx, use_long] : {std::pair<int64_t, bool>{0, false}, {kOriginal, false},
                               {kOriginal + 1, true}, {128, true}}) {
    LLMOptions opt;
    opt.kv_cache_bytes = 1 << 20;
    opt.ctx_size = ctx;
    LLM llm(weights(), std::nullopt, opt);
    EXPECT_EQ(llm.config().rope_scaling.use_long_factors, use_long) << "ctx " << ctx;
  }
}

INSTANTIATE_TEST_SUITE_P(HF, Phi3Format,
                         ::testing::Combine(::testing::Values("phi3", "phi4mini"),
                                            ::testing::Values("safetensors", "gguf")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// Phi-4-mini's partial rotary embeddings: 32 of each head's 64 dims rotate (both formats), the
// LongRoPE lists have 16 entries, and the dims must matter: rotating whole heads misses HF.
TEST(Phi4Mini, PartialRotaryFromBothFormats) {
  const ModelConfig hf = config_from_hf_json(tiny_dir("phi4mini") + "/config.json");
  const ModelConfig gg = config_from_gguf(GgufFile::open(tiny_dir("phi4mini") + "/model.gguf"));
  for (const ModelConfig* c : {&hf, &gg}) {
    EXPECT_EQ(c->head_dim, 64);
    EXPECT_EQ(c->rotary_dim, 32);
    EXPECT_EQ(c->rope_dim(), 32);
    EXPECT_TRUE(c->tie_word_embeddings);
    EXPECT_EQ(c->window_left(0), -1);
    EXPECT_EQ(c->rope_scaling.short_factor.size(), 16u);
    EXPECT_EQ(rope::inv_freq(*c).size(), 16u);
  }
  EXPECT_EQ(hf.rope_scaling.long_factor, gg.rope_scaling.long_factor);
  ModelWeights w = load_hf_model(tiny_dir("phi4mini"));
  w.config.rotary_dim = 0;  // whole heads, with whole-head frequencies
  w.config.rope_scaling.short_factor.resize(32, 1.0f);
  w.config.rope_scaling.long_factor.resize(32, 1.0f);
  auto whole = Model::create(std::move(w), Device::cpu());
  EXPECT_GT(test::teacher_forced_error(*whole, cases_on(false, "phi4mini"), 16, 4096, INFINITY),
            1e-2);
  // (On CUDA: model_families_gpu_test's Phi4MiniGpu.)
}

// Each Phi-3 feature matters: without it the HF reference is missed.
double error_with(bool use_long, auto&& edit) {
  ModelWeights w = load_hf_model(tiny_dir("phi3"));
  w.config.rope_scaling.use_long_factors = use_long;
  edit(w.config);
  auto model = Model::create(std::move(w), Device::cpu());
  return teacher_forced_error(*model, cases_on(use_long), 16, 4096, /*tolerance=*/INFINITY);
}

TEST(Phi3Features, EachChangesTheLogits) {
  EXPECT_GT(error_with(true, [](ModelConfig& c) { c.rope_scaling.use_long_factors = false; }), 1e-2);
  EXPECT_GT(error_with(false, [](ModelConfig& c) { c.rope_scaling.use_long_factors = true; }), 1e-2);
  EXPECT_GT(error_with(false, [](ModelConfig& c) { c.rope_scaling.attention_factor = 1.0; }), 1e-2);
  EXPECT_GT(error_with(true, [](ModelConfig& c) { c.sliding_window = 0; }), 1e-2);
}

// ---- a block-quantized GGUF: the split parts stay in the file's blocks -----------------------

// tiny_phi3 re-written with Q8_0 matrices (llama.cpp's phi3 names and keys).
void write_q8_phi3(const fs::path& path) {
  const GgufFile src = GgufFile::open(tiny_dir("phi3") + "/model.gguf");
  const ModelConfig c = config_from_gguf(src);
  testing::GgufBuilder b;
  b.kv_str("general.architecture", "phi3")
      .kv_u32("phi3.block_count", static_cast<uint32_t>(c.num_layers))
      .kv_u32("phi3.context_length", static_cast<uint32_t>(c.max_position_embeddings))
      .kv_u32("phi3.embedding_length", static_cast<uint32_t>(c.hidden_size))
      .kv_u32("phi3.feed_forward_length", static_cast<uint32_t>(c.intermediate_size))
      .kv_u32("phi3.attention.head_count", static_cast<uint32_t>(c.num_heads))
      .kv_u32("phi3.attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads))
      .kv_u32("phi3.rope.dimension_count", static_cast<uint32_t>(c.head_dim))
      .kv_f32("phi3.rope.freq_base", static_cast<float>(c.rope_theta))
      .kv_f32("phi3.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps))
      .kv_u32("phi3.rope.scaling.original_context_length", kOriginal)
      .kv_f32("phi3.rope.scaling.attn_factor", static_cast<float>(c.rope_scaling.attention_factor))
      .kv_u32("phi3.attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  for (const auto& t : src.tensors()) {
    const std::vector<float> v = read_floats(src.dequantize(t));
    const std::vector<uint64_t> ne(t.ne.begin(), t.ne.end());
    if (t.ne.size() == 2) {
      b.tensor(t.name, ne, /*Q8_0*/ 8, testing::q8_0_bytes(v));
    } else {
      b.tensor(t.name, ne, /*F32*/ 0, testing::f32_bytes(v));
    }
  }
  testing::write_file(path, b.build());
}

TEST(Phi3Weights, QuantizedSplitsReadTheFilesBlocks) {
  TempDir dir;
  const fs::path path = dir.path() / "q8.gguf";
  write_q8_phi3(path);
  ModelWeights kept = load_gguf_model(path.string(), {}, GgufLoadOptions{.keep_quantized = true});
  const ModelWeights floats = load_gguf_model(path.string());
  int parts = 0;
  for (const auto& [name, q] : kept.quantized) {
    if (name.find("layers") == std::string::npos) continue;
    EXPECT_EQ(q.type, GgmlType::kQ8_0) << name;
    EXPECT_EQ(read_floats(q.dequantize()), read_floats(floats.tensors.at(name))) << name;
    ++parts;
  }
  EXPECT_EQ(parts, 2 * 7);  // q, k, v, o, gate, up, down a layer
  // The CPU model computes on those blocks (qdot, each part its own segment): its logits are
  // the dequantized model's within the activations' quantization.
  LLMOptions opt;
  opt.kv_cache_bytes = 1 << 20;
  opt.weight_format = WeightFormat::kGguf;
  SamplingParams sp;
  sp.ignore_eos = true;
  sp.max_tokens = 8;
  const auto prompts = std::vector<std::vector<int32_t>>{cases_on(false)[1].prompt};
  LLM q8(std::move(kept), std::nullopt, opt);
  opt.weight_format = WeightFormat::kF32;
  LLM f32(load_gguf_model(path.string()), std::nullopt, opt);
  EXPECT_EQ(q8.generate(prompts, sp)[0].token_ids, f32.generate(prompts, sp)[0].token_ids);
}

// ---- what is refused, by name ------------------------------------------------------------------

template <typename Edit>
std::string hf_error(Edit edit) {
  TempDir dir;
  fs::copy_file(tiny_dir("phi3") + "/model.safetensors", dir.path() / "model.safetensors");
  std::ifstream in(tiny_dir("phi3") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  edit(cfg);
  std::ofstream(dir.path() / "config.json") << cfg.dump(2);
  return error_of([&] { load_hf_model(dir.path().string()); });
}

TEST(Phi3Errors, NameWhatIsWrong) {
  auto has = [](const std::string& msg, const std::string& text) {
    EXPECT_NE(msg.find(text), std::string::npos) << "error was: " << msg;
  };
  // A partial rotary factor must agree with the LongRoPE lists (3/4 of 64 dims: 24 pairs);
  // transformers 5 keeps it in rope_parameters, where it wins over the 4.x top-level key.
  has(hf_error([](auto& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.75; }),
      "short_factor has 32 entries but the rotary dims / 2 are 24");
  has(hf_error([](auto& c) { c["rope_parameters"]["partial_rotary_factor"] = 1.5; }),
      "partial_rotary_factor must be in (0, 1] but is 1.5");
  has(hf_error([](auto& c) { c["hidden_act"] = "gelu"; }), "hidden_act is 'gelu'");
  has(hf_error([](auto& c) { c["rope_parameters"]["long_factor"].erase(0); }),
      "short_factor and long_factor must be non-empty and of one length but have 32 and 31");
  has(hf_error([](auto& c) {
        c["rope_parameters"]["short_factor"].erase(0);
        c["rope_parameters"]["long_factor"].erase(0);
      }),
      "short_factor has 31 entries but the rotary dims / 2 are 32");
  has(hf_error([](auto& c) { c["rope_parameters"]["long_factor"][3] = -1.0; }),
      "long_factor[3] must be finite and > 0 but is -1");
  has(hf_error([](auto& c) { c["rope_parameters"].erase("long_factor"); }), "long_factor");
  // A fused tensor whose rows disagree with the config.
  has(hf_error([](auto& c) { c["intermediate_size"] = 64; }),
      "'model.layers.0.mlp.gate_up_proj.weight' has 192 rows but the config needs 128");
  // transformers 4.x's layout (rope_scaling, "su" for longrope) reads the same.
  TempDir dir;
  fs::copy_file(tiny_dir("phi3") + "/model.safetensors", dir.path() / "model.safetensors");
  std::ifstream in(tiny_dir("phi3") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  nlohmann::json rs = {{"type", "su"},
                       {"short_factor", cfg["rope_parameters"]["short_factor"]},
                       {"long_factor", cfg["rope_parameters"]["long_factor"]}};
  cfg.erase("rope_parameters");
  cfg["rope_scaling"] = rs;
  std::ofstream(dir.path() / "config.json") << cfg.dump(2);
  const ModelConfig old = config_from_hf_json((dir.path() / "config.json").string());
  const ModelConfig now = config_from_hf_json(tiny_dir("phi3") + "/config.json");
  EXPECT_EQ(old.rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(old.rope_scaling.short_factor, now.rope_scaling.short_factor);
  EXPECT_EQ(old.rope_scaling.original_max_position_embeddings, kOriginal);
  EXPECT_DOUBLE_EQ(old.rope_scaling.attention_factor, now.rope_scaling.attention_factor);
}

// Phi-3 128k's window (262144) is longer than its context (131072): it can never mask a key,
// so the config drops it (an fp8 cache on CUDA refuses windows).
TEST(Phi3Config, AWindowLongerThanTheContextIsDropped) {
  TempDir dir;
  std::ifstream in(tiny_dir("phi3") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  for (auto [window, kept] : {std::pair<int64_t, int64_t>{128, 0}, {127, 127}}) {
    cfg["sliding_window"] = window;
    std::ofstream(dir.path() / "config.json") << cfg.dump(2);
    const ModelConfig c = config_from_hf_json((dir.path() / "config.json").string());
    EXPECT_EQ(c.sliding_window, kept) << "window " << window;
    EXPECT_EQ(c.window_left(0), kept - 1);
  }
}

TEST(Phi3Errors, GgufWithOneFactorListIsRefused) {
  const GgufFile src = GgufFile::open(tiny_dir("phi3") + "/model.gguf");
  TempDir dir;
  const fs::path path = dir.path() / "one_list.gguf";
  testing::GgufBuilder b;
  b.kv_str("general.architecture", "phi3")
      .kv_u32("phi3.block_count", 2)
      .kv_u32("phi3.embedding_length", 128)
      .kv_u32("phi3.feed_forward_length", 96)
      .kv_u32("phi3.attention.head_count", 2)
      .kv_u32("phi3.rope.scaling.original_context_length", kOriginal);
  for (const auto& t : src.tensors()) {
    if (t.name == "rope_factors_long.weight") continue;
    b.tensor(t.name, std::vector<uint64_t>(t.ne.begin(), t.ne.end()), /*F32*/ 0,
             testing::f32_bytes(read_floats(src.dequantize(t))));
  }
  testing::write_file(path, b.build());
  EXPECT_ERROR_HAS(config_from_gguf(GgufFile::open(path.string())),
                   "rope_factors_short.weight and rope_factors_long.weight come together");
}

}  // namespace
}  // namespace kvattn
