// LLM::abort_request (the server's client-disconnect path): an aborted request frees its
// blocks at once, in every state it can be in (waiting, prefilling, decoding, forked n > 1,
// max_tokens == 0), and the requests left running produce exactly what they produce alone.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "kvattn/engine/llm.h"
#include "engine_test_util.h"

namespace kvattn {
namespace {

using test::checkpoint;
using test::greedy;
using test::random_tokens;

constexpr int64_t kBlockBytes = 32768;  // tiny models: 16 tokens x 2 layers x K,V x 2 x 64 f32

std::unique_ptr<LLM> make_llm(int64_t blocks, int64_t max_num_seqs = 64,
                              int64_t max_batched = 2048) {
  LLMOptions o;
  o.kv_cache_bytes = blocks * kBlockBytes;
  o.max_num_seqs = max_num_seqs;
  o.max_num_batched_tokens = max_batched;
  return std::make_unique<LLM>(load_hf_model(checkpoint("tiny_qwen3")), std::nullopt, o);
}

TEST(AbortRequest, UnknownIdIsFalse) {
  auto llm = make_llm(32);
  EXPECT_FALSE(llm->abort_request(0));
  const uint64_t id = llm->add_request({5, 6, 7}, greedy(3));
  EXPECT_TRUE(llm->abort_request(id));
  EXPECT_FALSE(llm->abort_request(id));  // twice
  EXPECT_FALSE(llm->has_unfinished_requests());
  EXPECT_TRUE(llm->step().empty());
  llm->check_kv_cache_idle();
}

TEST(AbortRequest, FreesBlocksInEveryStateAndKeepsOthersExact) {
  std::mt19937_64 rng(7);
  const std::vector<std::vector<int32_t>> prompts = {
      random_tokens(rng, 40), random_tokens(rng, 70), random_tokens(rng, 25),
      random_tokens(rng, 90), random_tokens(rng, 12)};
  std::vector<std::vector<int32_t>> alone;
  {
    auto ref = make_llm(256);
    for (const auto& p : prompts) alone.push_back(ref->generate({p}, greedy(20))[0].token_ids);
  }
  // A small step budget (chunked prefill) and two running slots: some requests wait.
  auto llm = make_llm(64, /*max_num_seqs=*/3, /*max_batched=*/32);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(llm->add_request(p, greedy(20)));
  SamplingParams forked = greedy(20);
  forked.n = 2;
  forked.temperature = 1.0f;
  const uint64_t fork_id = llm->add_request(prompts[0], forked);
  SamplingParams none = greedy(0);
  const uint64_t zero_id = llm->add_request(prompts[2], none);

  EXPECT_TRUE(llm->abort_request(zero_id));  // queued to end without a token
  std::map<uint64_t, std::vector<int32_t>> got;
  int steps = 0;
  while (llm->has_unfinished_requests()) {
    ++steps;
    if (steps == 2) EXPECT_TRUE(llm->abort_request(ids[1]));  // prefilling in chunks
    if (steps == 4) EXPECT_TRUE(llm->abort_request(ids[4]));  // still waiting
    if (steps == 6) EXPECT_TRUE(llm->abort_request(ids[0]));  // decoding
    const int64_t used_before = llm->cache_stats().num_used_blocks;
    if (steps == 30) {
      EXPECT_TRUE(llm->abort_request(fork_id));  // its two samples, forked or waiting
      EXPECT_LE(llm->cache_stats().num_used_blocks, used_before);
    }
    for (RequestOutput& o : llm->step()) got[o.request_id] = o.token_ids;
  }
  EXPECT_EQ(got.count(ids[0]) + got.count(ids[1]) + got.count(ids[4]) + got.count(zero_id), 0u);
  ASSERT_EQ(got.count(ids[2]), 1u);
  ASSERT_EQ(got.count(ids[3]), 1u);
  EXPECT_EQ(got[ids[2]], alone[2]);
  EXPECT_EQ(got[ids[3]], alone[3]);
  llm->check_kv_cache_idle();
}

TEST(AbortRequest, BlocksReturnBeforeTheNextStep) {
  std::mt19937_64 rng(3);
  auto llm = make_llm(64);
  const uint64_t a = llm->add_request(random_tokens(rng, 50), greedy(50));
  const uint64_t b = llm->add_request(random_tokens(rng, 30), greedy(50));
  for (int i = 0; i < 3; ++i) llm->step();
  const int64_t used = llm->cache_stats().num_used_blocks;
  ASSERT_GT(used, 0);
  EXPECT_TRUE(llm->abort_request(a));
  EXPECT_LT(llm->cache_stats().num_used_blocks, used);
  EXPECT_EQ(llm->num_running_seqs(), 1);
  EXPECT_TRUE(llm->abort_request(b));
  EXPECT_EQ(llm->num_running_seqs() + llm->num_waiting_seqs(), 0);
  llm->check_kv_cache_idle();
}

}  // namespace
}  // namespace kvattn
