// The GPU model (bf16) on the tiny HF checkpoints. Exits 77 without a
// CUDA device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "engine_test_util.h"

namespace kvattn {
namespace {

std::string data_dir(const std::string& arch) { return test::checkpoint("tiny_" + arch); }

using test::gpu_options;

class TinyGpu : public ::testing::TestWithParam<std::string> {};

// Greedy through the whole engine on the GPU; the first token's logits come from a prefill and
// are compared with HF's through the token choice only when HF's margin exceeds bf16 noise.
TEST_P(TinyGpu, GreedyTokensMatchHFWhereHFIsDecisive) {
  std::ifstream f(data_dir(GetParam()) + "/expected.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<float> first_margin;
  for (const auto& c : j.at("cases")) {
    prompts.push_back(c.at("prompt").get<std::vector<int32_t>>());
    greedy.push_back(c.at("greedy").get<std::vector<int32_t>>());
    auto l = c.at("logits")[0].get<std::vector<float>>();
    std::sort(l.begin(), l.end());
    first_margin.push_back(l[l.size() - 1] - l[l.size() - 2]);
  }
  LLM llm(load_hf_model(data_dir(GetParam())), std::nullopt, gpu_options());
  SamplingParams sp;
  sp.max_tokens = static_cast<int>(greedy[0].size());
  sp.ignore_eos = true;
  auto outs = llm.generate(prompts, sp);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(outs[i].token_ids.size(), greedy[i].size());
    if (first_margin[i] > 0.1f) EXPECT_EQ(outs[i].token_ids[0], greedy[i][0]) << "prompt " << i;
    size_t same = 0;
    while (same < greedy[i].size() && outs[i].token_ids[same] == greedy[i][same]) ++same;
    std::printf("[%s] prompt %zu: %zu of %zu tokens equal HF (float32)\n", GetParam().c_str(), i,
                same, greedy[i].size());
  }
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
}

TEST_P(TinyGpu, PrefixHitGivesTheSameTokensAsNoCache) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int32_t> d(3, 319);
  std::vector<int32_t> a(1000), b;
  for (auto& x : a) x = d(rng);
  b = a;
  for (int i = 0; i < 20; ++i) b.push_back(d(rng));
  a.push_back(7);
  SamplingParams sp;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  LLMOptions no_cache = gpu_options();
  no_cache.enable_prefix_caching = false;
  LLM ref(load_hf_model(data_dir(GetParam())), std::nullopt, no_cache);
  const auto expect = ref.generate({b}, sp)[0].token_ids;
  LLM llm(load_hf_model(data_dir(GetParam())), std::nullopt, gpu_options());
  llm.generate({a}, sp);
  EXPECT_EQ(llm.generate({b}, sp)[0].token_ids, expect);
  EXPECT_EQ(llm.last_stats().num_cached_tokens, 992);
}

// An fp8 (e4m3) KV cache on the GPU: the same byte budget holds twice the blocks of bf16, and
// greedy decoding follows the bf16 cache's tokens (random tiny weights: near-ties make later
// divergence expected; the agreement is printed and must cover most tokens). A second round of
// the same prompts hits the prefix cache, so the paged prefill reads fp8 blocks too. On the
// H200 (session 7) round 1 FAILED: 32/64 (llama) and 4/64 (qwen3) against the CPU reference's
// 61/64 and 25/64 (Fp8KvCacheEngine.PrefixHitsReadTheFp8Cache): the reason the engine path is
// opt-in; to be investigated.
TEST_P(TinyGpu, Fp8CacheHoldsTwiceTheBlocksAndFollowsBf16) {
  std::ifstream f(data_dir(GetParam()) + "/expected.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : j.at("cases")) prompts.push_back(c.at("prompt").get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  LLM bf16(load_hf_model(data_dir(GetParam())), std::nullopt, gpu_options());
  LLMOptions o = gpu_options();
  o.kv_cache_dtype = KVCacheDType::kFP8;
  setenv("KVATTN_EXPERIMENTAL_CUDA_FP8_KV", "1", 1);  // the engine path is opt-in (model.cpp)
  LLM fp8(load_hf_model(data_dir(GetParam())), std::nullopt, o);
  EXPECT_EQ(fp8.cache_stats().num_blocks, 2 * bf16.cache_stats().num_blocks);
  const auto want = bf16.generate(prompts, sp);
  for (int round = 0; round < 2; ++round) {
    const auto got = fp8.generate(prompts, sp);
    size_t agree = 0, total = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].token_ids.size(), 16u);
      size_t same = 0;
      while (same < 16 && got[i].token_ids[same] == want[i].token_ids[same]) ++same;
      agree += same;
      total += 16;
    }
    std::printf("[%s] fp8 cache, round %d: %zu of %zu tokens before the first divergence from "
                "bf16\n", GetParam().c_str(), round, agree, total);
    EXPECT_GT(agree, total / 2);
  }
  EXPECT_GT(fp8.cache_stats().hit_tokens, 0);
  EXPECT_EQ(fp8.cache_stats().num_used_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(HF, TinyGpu, ::testing::Values("llama", "qwen3"));

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
