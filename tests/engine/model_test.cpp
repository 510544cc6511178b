// The Llama and Qwen3 models against HF transformers, on the tiny random checkpoints in
// tests/data/tiny_{llama,qwen3} (made by scripts/make_tiny_checkpoints.py, which also saved
// HF's float32 logits). Every step runs through the paged KV cache, the BlockManager, the
// batch metadata builder and the Attention layer, as the engine does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "hf_reference.h"

namespace kvattn {
namespace {

using test::Case;
using test::load_cases;
using test::teacher_forced_error;

std::string data_dir(const std::string& arch) { return test::tiny_dir(arch); }

class TinyModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModel, LogitsMatchHFThroughThePagedCache) {
  const auto cases = load_cases(GetParam());
  auto model = Model::create(load_hf_model(data_dir(GetParam())), Device::cpu());
  for (int64_t bs : {16, 1, 7, 256}) {
    SCOPED_TRACE("block_size " + std::to_string(bs));
    const double worst = teacher_forced_error(*model, cases, bs, /*chunk=*/4096);
    std::printf("[%s] block %lld: max relative logit error vs HF %.2e\n", GetParam().c_str(),
                static_cast<long long>(bs), worst);
  }
}

TEST_P(TinyModel, ChunkedPrefillReadsTheCachedChunks) {
  const auto cases = load_cases(GetParam());
  auto model = Model::create(load_hf_model(data_dir(GetParam())), Device::cpu());
  for (int64_t chunk : {5, 16}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    teacher_forced_error(*model, cases, 16, chunk);
  }
}

TEST_P(TinyModel, LLMGreedyTokensMatchHF) {
  const auto cases = load_cases(GetParam());
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : cases) prompts.push_back(c.prompt);
  SamplingParams sp;
  sp.max_tokens = static_cast<int>(cases[0].greedy.size());
  sp.ignore_eos = true;
  LLMOptions opt;
  opt.kv_cache_bytes = 1 << 20;
  LLM llm(load_hf_model(data_dir(GetParam())), std::nullopt, opt);
  auto outs = llm.generate(prompts, sp);
  ASSERT_EQ(outs.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "prompt " << i;
    EXPECT_EQ(outs[i].finish_reason, FinishReason::kLength);
  }
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0) << "blocks leaked";
}

// Compact weight storage (q8 is the GGUF default on the CPU): only the weights' rounding
// differs, so the error follows the format's precision.
TEST_P(TinyModel, CompactWeightStorageStaysClose) {
  const auto cases = load_cases(GetParam());
  for (auto [fmt, tol] : {std::pair{WeightFormat::kF16, 5e-3}, std::pair{WeightFormat::kBF16, 3e-2},
                          std::pair{WeightFormat::kQ8, 8e-2}}) {
    ModelOptions mo;
    mo.weight_format = fmt;
    auto model = Model::create(load_hf_model(data_dir(GetParam())), Device::cpu(), mo);
    const double worst = teacher_forced_error(*model, cases, 16, 4096, tol);
    std::printf("[%s] %s weights: max relative logit error vs HF %.2e\n", GetParam().c_str(),
                std::string(weight_format_name(fmt)).c_str(), worst);
  }
}

// Tensor parallelism (engine/parallel): two ranks on threads, each with half the heads, half
// the MLP and half the vocabulary, all-reducing after o_proj/down_proj and gathering the
// logits, still match HF within the same bound, through the paged cache and chunked prefill.
TEST_P(TinyModel, TensorParallelRanksMatchHF) {
  const auto cases = load_cases(GetParam());
  ModelOptions mo;
  mo.tensor_parallel = 2;
  mo.num_threads = 1;
  auto model = Model::create(load_hf_model(data_dir(GetParam())), Device::cpu(), mo);
  EXPECT_EQ(model->config().num_heads, 4);  // the engine sees the full model
  EXPECT_EQ(model->config().vocab_size, 320);
  for (auto [bs, chunk] : {std::pair<int64_t, int64_t>{16, 4096}, {7, 5}}) {
    SCOPED_TRACE("block " + std::to_string(bs) + " chunk " + std::to_string(chunk));
    const double worst = teacher_forced_error(*model, cases, bs, chunk);
    std::printf("[%s] tensor parallel 2, block %lld: max relative logit error vs HF %.2e\n",
                GetParam().c_str(), static_cast<long long>(bs), worst);
  }
  mo.tensor_parallel = 4;  // 2 KV heads cannot be split 4 ways
  try {
    Model::create(load_hf_model(data_dir(GetParam())), Device::cpu(), mo);
    ADD_FAILURE() << "tensor_parallel 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must divide num_kv_heads (2)"), std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(HF, TinyModel, ::testing::Values("llama", "qwen3"));

// llama-architecture GGUF files keep Q/K rows permuted for interleaved-pair RoPE. Permuting
// the HF checkpoint the way convert_hf_to_gguf.py does and selecting kInterleaved must give
// the same logits.
TEST(TinyLlama, InterleavedRopeOnPermutedWeightsMatchesHF) {
  ModelWeights w = load_hf_model(data_dir("llama"));
  const int64_t d = w.config.head_dim, hidden = w.config.hidden_size;
  auto permute = [&](Tensor& t, int64_t heads) {
    Tensor out = Tensor::empty({heads * d, hidden}, DType::kF32);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < d / 2; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          std::copy_n(t.ptr<float>() + (h * d + j * d / 2 + i) * hidden, hidden,
                      out.ptr<float>() + (h * d + 2 * i + j) * hidden);
        }
      }
    }
    t = out;
  };
  for (int64_t l = 0; l < w.config.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    permute(w.tensors.at(p + "q_proj.weight"), w.config.num_heads);
    permute(w.tensors.at(p + "k_proj.weight"), w.config.num_kv_heads);
  }
  w.config.rope_style = ModelConfig::RopeStyle::kInterleaved;
  auto model = Model::create(std::move(w), Device::cpu());
  teacher_forced_error(*model, load_cases("llama"), 16, 4096);
}

TEST(TinyLlama, ModelRejectsBadInput) {
  auto model = Model::create(load_hf_model(data_dir("llama")), Device::cpu());
  model->allocate_kv_cache(8, 16);
  BatchContext ctx;
  std::vector<int32_t> ids = {5, 400}, pos = {0, 1}, rows = {1};
  std::vector<float> logits(model->config().vocab_size);
  ModelInput in{ids, pos, rows, &ctx};
  EXPECT_THROW(model->forward(in, logits), Error);  // id 400 >= vocab 320
  ModelWeights w = load_hf_model(data_dir("llama"));
  w.tensors.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_THROW(Model::create(std::move(w), Device::cpu()), Error);
#ifndef KVATTN_WITH_CUDA
  EXPECT_THROW(Model::create(load_hf_model(data_dir("llama")), Device::cuda(0)), Error);
#endif
}

}  // namespace
}  // namespace kvattn
