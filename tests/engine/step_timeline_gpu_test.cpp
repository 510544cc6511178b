// The CUDA model's step timeline (LLMOptions::step_timeline, cuda_step_events.h): one
// (start, end) pair per step of the last generate(), graphs on; busy time and gaps add up to
// the span and stay within the host's own measure; recording changes no output; a second
// generate() starts over. Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/llm.h"

namespace kvattn {
namespace {

std::unique_ptr<LLM> make(bool timeline) {
  LLMOptions o = test::gpu_options();
  o.max_num_batched_tokens = 48;  // chunked prefill, prefill and decode steps
  o.max_num_seqs = 8;
  o.step_timeline = timeline;
  return std::make_unique<LLM>(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
}

TEST(StepTimelineGpu, OnePairPerStepAddingUpWithGraphsOn) {
  std::mt19937_64 rng(9);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {45, 20, 61, 33, 8}) prompts.push_back(test::random_tokens(rng, n));
  auto plain = make(false);
  const auto want = test::tokens_of(plain->generate(prompts, test::greedy(24)));
  EXPECT_FALSE(plain->step_timeline().has_value());

  auto timed = make(true);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(test::tokens_of(timed->generate(prompts, test::greedy(24))), want);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::optional<StepTimeline> t = timed->step_timeline();
  ASSERT_TRUE(t.has_value());
  const GenerationStats& s = timed->last_stats();
  EXPECT_EQ(t->steps, s.num_steps);
  EXPECT_GT(t->busy_s, 0.0);
  EXPECT_GE(t->gap_s, 0.0);
  EXPECT_NEAR(t->busy_s + t->gap_s, t->span_s, 1e-5 * static_cast<double>(t->steps) + 1e-6);
  EXPECT_LE(t->span_s, wall);
  EXPECT_LE(t->gap_median_s, t->gap_p90_s);
  EXPECT_LE(t->gap_p90_s, t->gap_max_s);
  EXPECT_LE(t->gap_max_s, t->gap_s + 1e-9);

  // A second generate() covers its own steps only.
  timed->generate({prompts[0]}, test::greedy(4));
  const std::optional<StepTimeline> t2 = timed->step_timeline();
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(t2->steps, timed->last_stats().num_steps);
  EXPECT_LT(t2->steps, t->steps);
  timed->check_kv_cache_idle();
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
