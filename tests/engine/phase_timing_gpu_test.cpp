// Per-phase step times on the CUDA model (LLMOptions::phase_timing, cuda_phase_events.h):
// attention, GEMMs and other are measured and add up to the model time, the timed run (eager
// steps) gives the same outputs as a graph run without timing, and no block leaks. Exits 77
// without a CUDA device. Written without a GPU (issue 20); not yet run on one.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/llm.h"

namespace kvattn {
namespace {

std::unique_ptr<LLM> make(bool phase_timing) {
  LLMOptions o = test::gpu_options();
  o.max_num_batched_tokens = 48;  // chunked prefill, prefill and decode steps
  o.max_num_seqs = 8;
  o.phase_timing = phase_timing;
  return std::make_unique<LLM>(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
}

TEST(PhaseTimingGpu, PhasesMeasuredAndOutputsUnchanged) {
  std::mt19937_64 rng(8);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {45, 20, 61, 33, 8}) prompts.push_back(test::random_tokens(rng, n));
  auto plain = make(false);
  const auto want = test::tokens_of(plain->generate(prompts, test::greedy(24)));
  EXPECT_FALSE(plain->last_stats().phases_timed);

  auto timed = make(true);
  EXPECT_EQ(test::tokens_of(timed->generate(prompts, test::greedy(24))), want);
  const GenerationStats& s = timed->last_stats();
  ASSERT_TRUE(s.phases_timed);
  for (const StepTimeSplit* p : {&s.prefill_steps, &s.decode_steps}) {
    EXPECT_GT(p->steps, 0);
    EXPECT_GT(p->attention_seconds, 0.0);
    EXPECT_GT(p->gemm_seconds, 0.0);
    EXPECT_GE(p->other_seconds, 0.0);
    EXPECT_NEAR(p->attention_seconds + p->gemm_seconds + p->other_seconds, p->model_seconds,
                1e-9 + 1e-9 * p->model_seconds);
    std::printf("%lld steps: model %.3f ms (attention %.3f, GEMMs %.3f, other %.3f), host %.3f ms\n",
                static_cast<long long>(p->steps), 1e3 * p->model_seconds,
                1e3 * p->attention_seconds, 1e3 * p->gemm_seconds, 1e3 * p->other_seconds,
                1e3 * p->host_seconds);
  }
  timed->check_kv_cache_idle();
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
