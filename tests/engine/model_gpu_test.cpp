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
#include "teacher_forced.h"

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

// An fp8 (e4m3) KV cache on the GPU, through the LLM front end: the same byte budget holds
// twice the blocks of bf16, a second round of the same prompts hits the prefix cache (so the
// paged prefill reads fp8 blocks), and every block is free afterwards. The tokens' agreement
// with the bf16 cache is printed, not asserted: the tiny random models' logits are near-flat
// (top-2 margins ~0.01), so free-running greedy decoding diverges at the first flipped
// near-tie and the count measures chaos, not correctness (session 7 read 32/64 and 4/64 here
// as a failure; the CPU reference drops the same way, 48 -> 25 for qwen3). Correctness is
// Fp8TeacherForcedMatchesTheCpuModel's job.
TEST_P(TinyGpu, Fp8CacheHoldsTwiceTheBlocksAndServesPrefixHits) {
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
                "bf16 (informational)\n", GetParam().c_str(), round, agree, total);
  }
  EXPECT_GT(fp8.cache_stats().hit_tokens, 0);
  EXPECT_EQ(fp8.cache_stats().num_used_blocks, 0);
}

// The GPU model with an fp8 cache against the CPU model with an fp8 cache (the CPU reference
// of the same quantisation: store_kv is bit-exact between them), teacher-forced on the GPU bf16
// model's tokens, with the prefill split in two so that its second half reads the first from
// the paged fp8 cache (the prefix-hit path). The GPU-vs-CPU logit gap of the fp8 models must
// be of the size of the bf16 models' gap (bf16 activations on the GPU, float32 on the CPU; an
// fp8 rounding step flipped by that noise is 1/16 of a value, hence the factor); the fp8 GPU
// model's argmax agrees with the bf16 GPU model's at most steps, every disagreement's margin
// printed. KVATTN_FP8_TEACHER_CHECKPOINT names an extra checkpoint (the random Qwen3-0.6B of
// the GPU scripts) to run the same comparison on, GPU models only.
std::vector<std::vector<int32_t>> teacher_prompts(int64_t vocab) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 8; ++i) {
    auto t = test::random_tokens(rng, 5 + 37 * i % 150);
    for (auto& x : t) x %= static_cast<int32_t>(vocab);
    p.push_back(t);
  }
  return p;
}

std::unique_ptr<Model> make_model(const std::string& dir, Device d, KVCacheDType kv) {
  ModelOptions o;
  o.kv_cache_dtype = kv;
  return Model::create(load_hf_model(dir), d, o);
}

TEST_P(TinyGpu, Fp8TeacherForcedMatchesTheCpuModel) {
  const std::string dir = data_dir(GetParam());
  auto gpu_bf16 = make_model(dir, Device::cuda(0), KVCacheDType::kBF16);
  auto gpu_fp8 = make_model(dir, Device::cuda(0), KVCacheDType::kFP8);
  auto cpu_bf16 = make_model(dir, Device::cpu(), KVCacheDType::kBF16);
  auto cpu_fp8 = make_model(dir, Device::cpu(), KVCacheDType::kFP8);
  ASSERT_EQ(gpu_fp8->kv_dtype(), DType::kF8E4M3);
  const int64_t vocab = gpu_bf16->config().vocab_size;
  const auto logits = test::teacher_forced({gpu_bf16.get(), gpu_fp8.get(), cpu_bf16.get(),
                                            cpu_fp8.get()},
                                           teacher_prompts(vocab), 32, /*split_prefill=*/true);
  std::printf("[%s] teacher-forced, 8 prompts x (split prefill + 32 decode steps):\n",
              GetParam().c_str());
  const test::Agreement fp8 = test::compare(logits[0], logits[1], vocab, "gpu fp8 vs gpu bf16");
  const test::Agreement cpu = test::compare(logits[2], logits[3], vocab, "cpu fp8 vs cpu bf16");
  const test::Agreement noise = test::compare(logits[2], logits[0], vocab, "gpu bf16 vs cpu bf16");
  const test::Agreement same = test::compare(logits[3], logits[1], vocab, "gpu fp8 vs cpu fp8");
  // The prefix-hit step alone (step 0: the second prefill chunk over the paged fp8 cache).
  const double step0 = test::max_diff(logits[3][0], logits[1][0]);
  const double step0_noise = test::max_diff(logits[2][0], logits[0][0]);
  std::printf("split-prefill step: gpu fp8 vs cpu fp8 max logit diff %.4f, gpu bf16 vs cpu bf16 "
              "%.4f\n", step0, step0_noise);
  EXPECT_GE(fp8.agree, fp8.total * 85 / 100);
  EXPECT_LT(fp8.max_logit_diff, std::max(4.0 * cpu.max_logit_diff, 0.1));
  EXPECT_LE(same.max_logit_diff, std::max(3.0 * noise.max_logit_diff, 0.05));
  EXPECT_LE(step0, std::max(3.0 * step0_noise, 0.05));
}

TEST(Fp8Gpu, TeacherForcedOnAnExtraCheckpoint) {
  const char* dir = std::getenv("KVATTN_FP8_TEACHER_CHECKPOINT");
  if (dir == nullptr) GTEST_SKIP() << "KVATTN_FP8_TEACHER_CHECKPOINT not set";
  auto gpu_bf16 = make_model(dir, Device::cuda(0), KVCacheDType::kBF16);
  auto gpu_fp8 = make_model(dir, Device::cuda(0), KVCacheDType::kFP8);
  const int64_t vocab = gpu_bf16->config().vocab_size;
  const auto logits = test::teacher_forced({gpu_bf16.get(), gpu_fp8.get()},
                                           teacher_prompts(vocab), 32, /*split_prefill=*/true);
  std::printf("[%s] teacher-forced, 8 prompts x (split prefill + 32 decode steps):\n", dir);
  const test::Agreement fp8 = test::compare(logits[0], logits[1], vocab, "gpu fp8 vs gpu bf16");
  EXPECT_GE(fp8.agree, fp8.total * 85 / 100);
}

INSTANTIATE_TEST_SUITE_P(HF, TinyGpu, ::testing::Values("llama", "qwen3"));

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
