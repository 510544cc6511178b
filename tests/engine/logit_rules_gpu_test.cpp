// SamplingParams' host-side rules (LogitRules: allowed_token_ids, logit_bias, penalties) on the
// CUDA engine, where such a row's logits cross to the host and are drawn there while the
// other rows of the step draw on the device:
// - allowed_token_ids holding every token the free greedy run generated leaves that run as
//   it was (each step's argmax is allowed), in a batch beside unconstrained requests, graphs
//   on and off; a small random set confines every token to it;
// - a banned token (logit_bias -100) never appears, and the other requests of the batch are
//   the same tokens as alone.
// Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

using Tokens = std::vector<std::vector<int32_t>>;

std::vector<std::vector<int32_t>> prompts_of(std::mt19937_64& rng, size_t n) {
  std::vector<std::vector<int32_t>> p;
  for (size_t i = 0; i < n; ++i) p.push_back(test::random_tokens(rng, 5 + 9 * i));
  return p;
}

TEST(LogitRulesGpu, AllowedTokenIdsKeepTheGreedyRunAndConfine) {
  std::mt19937_64 rng(31);
  const auto prompts = prompts_of(rng, 5);
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    LLMOptions o = test::gpu_options();
    o.cuda_graphs = graphs;
    LLM llm(load_hf_model(test::checkpoint("tiny_llama")), std::nullopt, o);
    const SamplingParams free_sp = test::greedy(16);
    const Tokens free_run = test::tokens_of(llm.generate(prompts, free_sp));
    std::set<int32_t> seen;
    for (const auto& t : free_run) seen.insert(t.begin(), t.end());
    // Requests 1 and 3 allow what the free runs generated; the others run free beside them.
    SamplingParams allowed = free_sp;
    allowed.allowed_token_ids.assign(seen.begin(), seen.end());
    std::vector<SamplingParams> per = {free_sp, allowed, free_sp, allowed, free_sp};
    EXPECT_EQ(test::tokens_of(llm.generate(prompts, per)), free_run);
    // A random set of 4 ids: every token among them, free requests beside them unchanged.
    SamplingParams few = free_sp;
    few.allowed_token_ids = {17, 99, 250, 3};
    per = {few, free_sp, few, free_sp, few};
    const Tokens confined = test::tokens_of(llm.generate(prompts, per));
    for (size_t i = 0; i < confined.size(); ++i) {
      if (i % 2 == 1) {
        EXPECT_EQ(confined[i], free_run[i]) << "free request " << i << " changed";
        continue;
      }
      ASSERT_EQ(confined[i].size(), 16u);
      for (int32_t t : confined[i]) {
        EXPECT_TRUE(t == 17 || t == 99 || t == 250 || t == 3) << "request " << i << ": " << t;
      }
    }
    // A ban: the free run's first token of request 2 never appears in it.
    SamplingParams ban = free_sp;
    ban.logit_bias = {{free_run[2][0], -100.0f}};
    per = {free_sp, free_sp, ban, free_sp, free_sp};
    const Tokens banned = test::tokens_of(llm.generate(prompts, per));
    EXPECT_EQ(std::count(banned[2].begin(), banned[2].end(), free_run[2][0]), 0);
    EXPECT_EQ(banned[0], free_run[0]);
    EXPECT_EQ(banned[4], free_run[4]);
    llm.check_kv_cache_idle();
  }
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
