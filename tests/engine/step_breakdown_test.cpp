// The per-step time breakdown (LLMOptions::phase_timing, GenerationStats's step splits) and
// LLM::set_prefix_caching on the tiny random Qwen3. No speed is asserted: only that the parts
// are measured, add up to the step time and to the wall time around generate().
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"

namespace kvattn {
namespace {

std::unique_ptr<LLM> make_llm(bool phase_timing, bool prefix_caching = true) {
  LLMOptions o;
  o.kv_cache_bytes = 4 << 20;
  o.max_num_batched_tokens = 64;  // chunked prefill, and steps of both kinds
  o.phase_timing = phase_timing;
  o.enable_prefix_caching = prefix_caching;
  return std::make_unique<LLM>(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
}

std::vector<std::vector<int32_t>> prompts(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> p;
  for (size_t i = 0; i < n; ++i) p.push_back(test::random_tokens(rng, 20 + 37 * i));
  return p;
}

void expect_split_adds_up(const StepTimeSplit& s) {
  EXPECT_GE(s.attention_seconds, 0.0);
  EXPECT_GE(s.gemm_seconds, 0.0);
  EXPECT_GE(s.other_seconds, 0.0);
  EXPECT_GE(s.host_seconds, 0.0);
  EXPECT_NEAR(s.attention_seconds + s.gemm_seconds + s.other_seconds, s.model_seconds,
              1e-9 + 1e-9 * s.model_seconds);
}

TEST(StepBreakdown, PhasesAddUpToTheStepsAndTheWallTime) {
  auto llm = make_llm(true);
  llm->generate(prompts(1, 9), test::greedy(2));  // first-call costs out of the figures
  const auto t = std::chrono::steady_clock::now();
  llm->generate(prompts(5, 1), test::greedy(12));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  const GenerationStats& s = llm->last_stats();

  ASSERT_TRUE(s.phases_timed);
  const StepTimeSplit all = s.all_steps();
  EXPECT_EQ(all.steps, s.num_steps);
  EXPECT_GT(s.prefill_steps.steps, 1);  // 5 prompts of 20..168 tokens in 64-token steps
  EXPECT_GT(s.decode_steps.steps, 0);
  expect_split_adds_up(s.prefill_steps);
  expect_split_adds_up(s.decode_steps);
  // Every phase did some work.
  EXPECT_GT(all.attention_seconds, 0.0);
  EXPECT_GT(all.gemm_seconds, 0.0);
  EXPECT_GT(all.other_seconds, 0.0);
  EXPECT_GT(all.host_seconds, 0.0);
  // The splits are the step loop's time: the totals agree, and generate() spends little
  // outside its steps (enqueueing the prompts).
  EXPECT_NEAR(all.model_seconds, s.model_seconds, 1e-9);
  EXPECT_NEAR(all.host_seconds, s.host_seconds, 1e-9);
  EXPECT_LE(all.seconds(), wall * 1.001 + 1e-4);
  EXPECT_GE(all.seconds(), 0.7 * wall - 0.01) << "steps " << all.seconds() << " s of " << wall;
}

TEST(StepBreakdown, OffByDefaultAndModelHostSplitStillKept) {
  auto llm = make_llm(false);
  llm->generate(prompts(3, 2), test::greedy(4));
  const GenerationStats& s = llm->last_stats();
  EXPECT_FALSE(s.phases_timed);
  const StepTimeSplit all = s.all_steps();
  EXPECT_EQ(all.steps, s.num_steps);
  EXPECT_GT(all.model_seconds, 0.0);
  EXPECT_EQ(all.attention_seconds, 0.0);
  EXPECT_EQ(all.gemm_seconds, 0.0);
  EXPECT_EQ(all.other_seconds, 0.0);
}

// attended_keys: each row's sequence length at the end of its step. One 150-token prompt in
// 64-token steps: chunks ending at 64, 128 and 150 (the last yields the first token), then
// four decode steps at lengths 151..154.
TEST(StepBreakdown, AttendedKeysAreEachRowsLengthAfterItsStep) {
  auto llm = make_llm(false);
  std::mt19937_64 rng(5);
  llm->generate({test::random_tokens(rng, 150)}, test::greedy(5));
  const GenerationStats& s = llm->last_stats();
  EXPECT_EQ(s.prefill_steps.steps, 3);
  EXPECT_EQ(s.prefill_steps.attended_keys, 64 + 128 + 150);
  EXPECT_EQ(s.decode_steps.steps, 4);
  EXPECT_EQ(s.decode_steps.attended_keys, 151 + 152 + 153 + 154);
  EXPECT_EQ(s.all_steps().attended_keys, 342 + 610);
  const ModelConfig& c = llm->config();
  const int64_t per_element = 2 * c.num_layers * c.num_kv_heads * c.head_dim;
  EXPECT_GT(llm->kv_bytes_per_token(), 0);
  EXPECT_EQ(llm->kv_bytes_per_token() % per_element, 0);
  EXPECT_LE(llm->kv_bytes_per_token(), 4 * per_element);
}

TEST(StepBreakdown, PhaseTimingChangesNoToken) {
  const auto p = prompts(4, 3);
  auto timed = make_llm(true);
  auto plain = make_llm(false);
  EXPECT_EQ(test::tokens_of(timed->generate(p, test::greedy(10))),
            test::tokens_of(plain->generate(p, test::greedy(10))));
}

// Between runs the prefix cache goes off and on again: off serves nothing, each switch
// forgets the cached prefixes, and the tokens stay those of an engine built without it.
TEST(StepBreakdown, SetPrefixCachingBetweenRuns) {
  std::mt19937_64 rng(4);
  const auto prefix = test::random_tokens(rng, 96);
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 3; ++i) {
    auto q = prefix;
    const auto own = test::random_tokens(rng, 10 + 7 * i);
    q.insert(q.end(), own.begin(), own.end());
    p.push_back(q);
  }
  auto ref = make_llm(false, false);
  const auto want = test::tokens_of(ref->generate(p, test::greedy(6)));

  auto llm = make_llm(false);
  llm->generate({p[0]}, test::greedy(1));  // caches the prefix
  llm->set_prefix_caching(false);
  EXPECT_EQ(test::tokens_of(llm->generate(p, test::greedy(6))), want);
  EXPECT_EQ(llm->last_stats().num_cached_tokens, 0);
  llm->check_kv_cache_idle();

  llm->set_prefix_caching(true);  // a fresh cache: the first prompt misses, then hits
  using Tokens = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(test::tokens_of(llm->generate({p[0]}, test::greedy(6))), Tokens{want[0]});
  EXPECT_EQ(llm->last_stats().num_cached_tokens, 0);
  EXPECT_EQ(test::tokens_of(llm->generate({p[1], p[2]}, test::greedy(6))),
            (Tokens{want[1], want[2]}));
  EXPECT_EQ(llm->last_stats().num_cached_tokens, 2 * 96);  // 6 full blocks each
  llm->check_kv_cache_idle();

  llm->add_request(p[0], test::greedy(2));
  EXPECT_THROW(llm->set_prefix_caching(false), Error);
  while (llm->has_unfinished_requests()) llm->step();
}

}  // namespace
}  // namespace kvattn
