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

namespace kvattn {
namespace {

struct Case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;             // HF's greedy continuation
  std::vector<std::vector<float>> logits;  // HF's logits at each step of it
};

std::string data_dir(const std::string& arch) {
  return std::string(KVATTN_SOURCE_DIR) + "/tests/data/tiny_" + arch;
}

std::vector<Case> load_cases(const std::string& arch) {
  std::ifstream f(data_dir(arch) + "/expected.json");
  EXPECT_TRUE(f.good()) << "missing " << data_dir(arch) << "/expected.json";
  const auto j = nlohmann::json::parse(f);
  std::vector<Case> cases;
  for (const auto& c : j.at("cases")) {
    cases.push_back({c.at("prompt").get<std::vector<int32_t>>(),
                     c.at("greedy").get<std::vector<int32_t>>(),
                     c.at("logits").get<std::vector<std::vector<float>>>()});
  }
  return cases;
}

// max |out - ref| / max |ref| over one row of logits.
double max_rel_error(const float* out, const std::vector<float>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    err = std::max(err, std::abs(static_cast<double>(out[i]) - ref[i]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  }
  return err / scale;
}

// All cases batched: one prefill step (`chunk` tokens per step at most), then decode steps fed
// with HF's greedy tokens (teacher forcing, so a near-tie cannot desynchronise the
// comparison). Returns the worst relative logit error over every step.
double teacher_forced_error(Model& model, const std::vector<Case>& cases, int64_t block_size,
                            int64_t chunk, double tolerance = 1e-4) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t num_blocks = 64 * 1024 / block_size;
  model.allocate_kv_cache(num_blocks, block_size);
  BlockManager bm(num_blocks, block_size, /*enable_prefix_caching=*/false);
  BatchMetadataBuilder builder(bm);
  std::vector<Sequence> seqs;
  for (size_t i = 0; i < cases.size(); ++i) {
    seqs.emplace_back(static_cast<SeqId>(i), cases[i].prompt);
    bm.allocate(seqs.back());
  }
  std::vector<size_t> step(cases.size(), 0);
  double worst = 0;
  for (bool busy = true; busy;) {
    std::vector<ScheduledSequence> batch;
    std::vector<size_t> who;
    std::vector<int32_t> rows, sampled;
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step[i] >= cases[i].greedy.size()) continue;
      const int64_t n = std::min(seqs[i].num_uncomputed_tokens(), chunk);
      batch.push_back({&seqs[i], n});
      who.push_back(i);
      if (seqs[i].num_computed_tokens() + n == seqs[i].num_tokens()) {
        rows.push_back(static_cast<int32_t>(row + n - 1));
        sampled.push_back(static_cast<int32_t>(i));
      }
      row += n;
    }
    busy = !batch.empty();
    if (!busy) break;
    const BatchMetadata& meta = builder.build(batch);
    std::vector<float> logits(rows.size() * vocab, NAN);
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    model.forward(in, logits);
    for (size_t b = 0; b < batch.size(); ++b) bm.mark_computed(seqs[who[b]], batch[b].num_new_tokens);
    for (size_t r = 0; r < sampled.size(); ++r) {
      const size_t i = sampled[r];
      const double e = max_rel_error(&logits[r * vocab], cases[i].logits[step[i]]);
      EXPECT_LT(e, tolerance) << "case " << i << " (prompt " << cases[i].prompt.size()
                         << " tokens) step " << step[i];
      worst = std::max(worst, e);
      seqs[i].append_token(cases[i].greedy[step[i]]);
      ++step[i];
      bm.append(seqs[i]);
    }
  }
  for (auto& s : seqs) bm.free(s);
  return worst;
}

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
