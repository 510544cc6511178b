// The generate loop on the tiny random Llama (no tokenizer: token ids in and out): prefix
// caching, preemption, chunked prefill, streaming events, stop conditions and seeds.
#include "kvattn/engine/llm.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine_test_util.h"

namespace kvattn {
namespace {

std::string tiny_llama() { return test::checkpoint("tiny_llama"); }

std::unique_ptr<LLM> make_llm(LLMOptions opt = {}) {
  if (opt.kv_cache_bytes == 0) opt.kv_cache_bytes = 4 << 20;
  return std::make_unique<LLM>(load_hf_model(tiny_llama()), std::nullopt, opt);
}

using test::greedy;
using test::random_tokens;
using test::tokens_of;

// A second request sharing a 1,000-token prefix computes only its own tail, and its tokens
// equal those of an engine without prefix caching.
TEST(LLM, PrefixCacheServesASharedThousandTokenPrefix) {
  std::mt19937_64 rng(3);
  const auto prefix = random_tokens(rng, 1000);
  auto a = prefix, b = prefix;
  const auto ta = random_tokens(rng, 24), tb = random_tokens(rng, 37);
  a.insert(a.end(), ta.begin(), ta.end());
  b.insert(b.end(), tb.begin(), tb.end());

  LLMOptions no_cache;
  no_cache.enable_prefix_caching = false;
  auto ref = make_llm(no_cache);
  const auto ref_a = ref->generate({a}, greedy(16))[0].token_ids;
  const auto ref_b = ref->generate({b}, greedy(16))[0].token_ids;

  auto llm = make_llm();
  EXPECT_EQ(llm->generate({a}, greedy(16))[0].token_ids, ref_a);
  EXPECT_EQ(llm->last_stats().num_cached_tokens, 0);
  EXPECT_EQ(llm->last_stats().num_prefill_tokens, 1024);

  auto out_b = llm->generate({b}, greedy(16));
  const GenerationStats& s = llm->last_stats();
  EXPECT_EQ(out_b[0].token_ids, ref_b);
  EXPECT_EQ(s.num_cached_tokens, 992);  // 62 full blocks of 16 inside the shared 1,000
  EXPECT_EQ(out_b[0].num_cached_tokens, 992);
  EXPECT_EQ(s.num_prefill_tokens, 1037 - 992);
  std::printf("second request: %lld of %lld prompt tokens from the prefix cache (hit rate %.3f)\n",
              static_cast<long long>(s.num_cached_tokens),
              static_cast<long long>(s.num_prompt_tokens), s.prefix_hit_rate());

  // The same prompt again: every full block but the one holding the last token is a hit.
  EXPECT_EQ(llm->generate({a}, greedy(16))[0].token_ids, ref_a);
  EXPECT_EQ(llm->last_stats().num_cached_tokens, 1008);
  EXPECT_EQ(llm->cache_stats().num_used_blocks, 0);
}

TEST(LLM, PreemptionUnderASmallPoolKeepsTheTokens) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {40, 3, 25, 60, 17}) prompts.push_back(random_tokens(rng, n));
  const auto expect = tokens_of(make_llm()->generate(prompts, greedy(24)));

  LLMOptions small;
  small.kv_cache_bytes = 8 * 32768;  // 8 blocks of 16 tokens (tiny llama: 32 KiB per block)
  auto llm = make_llm(small);
  EXPECT_EQ(llm->kv_cache_tokens(), 128);
  EXPECT_EQ(tokens_of(llm->generate(prompts, greedy(24))), expect);
  EXPECT_GT(llm->last_stats().num_preemptions, 0);
  EXPECT_EQ(llm->cache_stats().num_used_blocks, 0);
}

TEST(LLM, ChunkedPrefillAndSmallBatchesGiveTheSameTokens) {
  std::mt19937_64 rng(9);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {70, 1, 33}) prompts.push_back(random_tokens(rng, n));
  const auto expect = tokens_of(make_llm()->generate(prompts, greedy(12)));
  LLMOptions opt;
  opt.max_num_batched_tokens = 7;
  opt.max_num_seqs = 2;
  opt.block_size = 5;
  EXPECT_EQ(tokens_of(make_llm(opt)->generate(prompts, greedy(12))), expect);
}

// Tensor parallelism (issue 8) through the whole engine: two ranks (threads on the CPU),
// with preemption and chunked prefill, give TP=1's greedy tokens, and every block is free.
TEST(LLM, TensorParallelTwoRanksGiveTheSameTokens) {
  std::mt19937_64 rng(12);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {40, 3, 25, 60, 17}) prompts.push_back(random_tokens(rng, n));
  LLMOptions opt;
  opt.num_threads = 1;
  const auto expect = tokens_of(make_llm(opt)->generate(prompts, greedy(24)));
  opt.tensor_parallel = 2;
  opt.max_num_batched_tokens = 32;
  opt.kv_cache_bytes = 8 * 32768;  // 8 blocks: preemption
  auto llm = make_llm(opt);
  EXPECT_EQ(tokens_of(llm->generate(prompts, greedy(24))), expect);
  EXPECT_GT(llm->last_stats().num_preemptions, 0);
  EXPECT_GT(llm->last_stats().num_partial_prefills, 0);
  EXPECT_EQ(llm->cache_stats().num_used_blocks, 0);
}

TEST(LLM, StreamsOneEventPerTokenAndEndsEachPrompt) {
  std::mt19937_64 rng(1);
  std::vector<std::vector<int32_t>> prompts = {random_tokens(rng, 9), random_tokens(rng, 4)};
  auto llm = make_llm();
  std::vector<std::vector<int32_t>> seen(2);
  std::vector<int> finished(2);
  auto outs = llm->generate(prompts, greedy(6), [&](const TokenEvent& e) {
    ASSERT_LT(e.index, 2u);
    EXPECT_EQ(finished[e.index], 0) << "event after the last one";
    if (e.token >= 0) seen[e.index].push_back(e.token);
    if (e.finished) finished[e.index]++;
  });
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(seen[i], outs[i].token_ids);
    EXPECT_EQ(finished[i], 1);
    EXPECT_EQ(outs[i].token_ids.size(), 6u);
    EXPECT_EQ(outs[i].finish_reason, FinishReason::kLength);
  }
  const GenerationStats& s = llm->last_stats();
  EXPECT_EQ(s.num_prefill_tokens, 13);
  EXPECT_EQ(s.num_decode_tokens, 2 * 5);  // the first token of each comes from the prefill
}

TEST(LLM, StopsAtStopTokensAndEosUnlessIgnored) {
  std::mt19937_64 rng(2);
  const auto prompt = random_tokens(rng, 12);
  auto llm = make_llm();
  const auto free_run = llm->generate({prompt}, greedy(10))[0].token_ids;
  ASSERT_EQ(free_run.size(), 10u);

  SamplingParams sp = greedy(10);
  sp.stop_token_ids = {free_run[3]};
  auto out = llm->generate({prompt}, sp)[0];
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(out.token_ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + first));
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.stop_token, free_run[3]);

  // Make the model's eos the 3rd greedy token: generation stops there unless ignore_eos.
  ModelWeights w = load_hf_model(tiny_llama());
  w.config.eos_token_id = free_run[2];
  LLM eos_llm(std::move(w), std::nullopt, LLMOptions{.kv_cache_bytes = 4 << 20});
  sp = greedy(10);
  sp.ignore_eos = false;
  const auto to_eos = eos_llm.generate({prompt}, sp)[0];
  EXPECT_EQ(to_eos.finish_reason, FinishReason::kStop);
  EXPECT_LE(to_eos.token_ids.size(), 2u);
  sp.ignore_eos = true;
  EXPECT_EQ(eos_llm.generate({prompt}, sp)[0].token_ids, free_run);

  sp.max_tokens = 0;
  out = llm->generate({prompt}, sp)[0];
  EXPECT_TRUE(out.token_ids.empty());
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
}

TEST(LLM, SeededSamplingIsReproducibleAndBatchIndependent) {
  std::mt19937_64 rng(4);
  const auto p0 = random_tokens(rng, 10), p1 = random_tokens(rng, 20);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.95f;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  sp.seed = 1234;
  auto llm = make_llm();
  const auto alone = llm->generate({p0}, sp)[0].token_ids;
  EXPECT_EQ(llm->generate({p0}, sp)[0].token_ids, alone);
  EXPECT_EQ(llm->generate({p0, p1}, sp)[0].token_ids, alone);
  sp.seed = 4321;
  EXPECT_NE(llm->generate({p0}, sp)[0].token_ids, alone);
}

TEST(LLM, RejectsBadPrompts) {
  auto llm = make_llm();
  EXPECT_THROW(llm->generate(std::vector<std::vector<int32_t>>{{}}, greedy(4)), Error);
  EXPECT_THROW(llm->generate(std::vector<std::vector<int32_t>>{{1, 320}}, greedy(4)), Error);
  EXPECT_THROW(llm->generate(std::vector<std::string>{"text needs a tokenizer"}, greedy(4)),
               Error);
  LLMOptions tiny_pool;
  tiny_pool.kv_cache_bytes = 2 * 32768;  // 32 tokens
  EXPECT_THROW(make_llm(tiny_pool)->generate({std::vector<int32_t>(33, 5)}, greedy(4)), Error);
  // The engine is still usable after a rejected call.
  EXPECT_EQ(llm->generate({std::vector<int32_t>{5, 6}}, greedy(3))[0].token_ids.size(), 3u);
}

}  // namespace
}  // namespace kvattn
