// SamplingParams::prompt_logprobs: every prompt token after the first carries its
// log-probability given the tokens before it (RequestOutput::prompt_logprobs), against the
// logits of one whole-prompt prefill through Model::forward on a model of its own (tiny_qwen3
// on the CPU): prompts longer than kPromptLogprobsChunk (several chunks), the prefix cache
// (such a request reads none of it, others still do), max_tokens == 0 (the prompt runs,
// nothing is generated), n > 1, a batch beside requests that do not ask, and the checks.
// KVATTN_TEST_DEVICE=cuda runs the engine and its reference on GPU 0 instead (bf16 there: the
// log-probabilities agree to 3e-2 rather than 2e-3); CI runs it on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

bool on_cuda() {
  const char* d = std::getenv("KVATTN_TEST_DEVICE");
  return d != nullptr && std::strcmp(d, "cuda") == 0;
}
Device test_device() { return on_cuda() ? Device::cuda(0) : Device::cpu(); }
double tolerance() { return on_cuda() ? 3e-2 : 2e-3; }

std::unique_ptr<LLM> make_llm(int64_t max_batched_tokens = 512) {
  LLMOptions o;
  o.device = test_device();
  o.kv_cache_bytes = 8 << 20;
  o.max_num_batched_tokens = max_batched_tokens;
  return std::make_unique<LLM>(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
}

// Logits of rows 0..P-2 of one prefill of the whole prompt (row p predicts token p + 1).
std::vector<std::vector<float>> reference_rows(const std::vector<int32_t>& prompt) {
  auto model = Model::create(load_hf_model(test::checkpoint("tiny_qwen3")), test_device());
  const int64_t vocab = model->config().vocab_size, bs = 16;
  const int64_t blocks = static_cast<int64_t>(prompt.size()) / bs + 2;
  model->allocate_kv_cache(blocks, bs);
  BlockManager bm(blocks, bs, /*enable_prefix_caching=*/false);
  BatchMetadataBuilder builder(bm);
  Sequence s(0, prompt);
  bm.allocate(s);
  const auto n = static_cast<int64_t>(prompt.size());
  const std::vector<ScheduledSequence> batch = {{&s, n}};
  const BatchMetadata& meta = builder.build(batch);
  std::vector<int32_t> rows(static_cast<size_t>(n - 1));
  for (int64_t p = 0; p + 1 < n; ++p) rows[static_cast<size_t>(p)] = static_cast<int32_t>(p);
  ModelInput in;
  in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.logit_rows = rows;
  in.ctx = &meta.ctx;
  std::vector<float> logits(rows.size() * static_cast<size_t>(vocab));
  model->forward(in, logits);
  bm.free(s);
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    out.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                     logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
  }
  return out;
}

// Each entry against token_logprobs of the reference row: the prompt token's log-probability
// and the top-n's (chunked prefill reads the earlier chunks from the paged cache, so the
// logits agree to rounding, not bit for bit; ids are compared where the logprobs are apart).
void expect_matches_reference(const std::vector<TokenLogprobs>& got,
                              const std::vector<int32_t>& prompt, int top_n) {
  const auto ref = reference_rows(prompt);
  ASSERT_EQ(got.size(), prompt.size() - 1);
  for (size_t p = 0; p < got.size(); ++p) {
    const TokenLogprobs want = token_logprobs(ref[p], prompt[p + 1], top_n);
    SCOPED_TRACE("prompt token " + std::to_string(p + 1));
    EXPECT_NEAR(got[p].logprob, want.logprob, tolerance());
    ASSERT_EQ(got[p].top.size(), static_cast<size_t>(top_n));
    for (size_t k = 0; k < want.top.size(); ++k) {
      EXPECT_NEAR(got[p].top[k].logprob, want.top[k].logprob, tolerance()) << "rank " << k;
      const double gap = 5 * tolerance();
      const bool apart = (k == 0 || want.top[k - 1].logprob - want.top[k].logprob > gap) &&
                         (k + 1 == want.top.size() ||
                          want.top[k].logprob - want.top[k + 1].logprob > gap);
      if (apart) EXPECT_EQ(got[p].top[k].token, want.top[k].token) << "rank " << k;
    }
    if (!got[p].top.empty()) EXPECT_GE(got[p].top[0].logprob, got[p].logprob - 1e-6);
  }
}

SamplingParams with_prompt_logprobs(int top_n, int max_tokens) {
  SamplingParams sp = test::greedy(max_tokens);
  sp.prompt_logprobs = top_n;
  return sp;
}

TEST(PromptLogprobs, MatchTheWholePromptsLogitsAcrossChunks) {
  auto llm = make_llm();
  std::mt19937_64 rng(21);
  // 300 tokens: chunks of 128, 128, 44 (kPromptLogprobsChunk), within a 512-token step budget.
  const auto prompt = test::random_tokens(rng, 300);
  const auto outs = llm->generate({prompt}, with_prompt_logprobs(4, 3));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].token_ids.size(), 3u);
  EXPECT_TRUE(outs[0].logprobs.empty());  // logprobs (generated tokens) were not asked
  expect_matches_reference(outs[0].prompt_logprobs, prompt, 4);
  EXPECT_GE(llm->last_stats().num_partial_prefills, 2);  // the chunk cap split the prompt
  llm->check_kv_cache_idle();
}

TEST(PromptLogprobs, ThePrefixCacheServesSuchRequestsNothing) {
  auto llm = make_llm();
  std::mt19937_64 rng(22);
  const auto prompt = test::random_tokens(rng, 150);
  const auto first = llm->generate({prompt}, with_prompt_logprobs(0, 2));
  // The same prompt again: its blocks are cached now, yet every row is computed again.
  const auto again = llm->generate({prompt}, with_prompt_logprobs(0, 2));
  EXPECT_EQ(again[0].num_cached_tokens, 0);
  ASSERT_EQ(again[0].prompt_logprobs.size(), first[0].prompt_logprobs.size());
  for (size_t p = 0; p < first[0].prompt_logprobs.size(); ++p) {
    EXPECT_EQ(again[0].prompt_logprobs[p].logprob, first[0].prompt_logprobs[p].logprob);
    EXPECT_TRUE(again[0].prompt_logprobs[p].top.empty());  // top 0: the token's own only
  }
  // A request that does not ask still reads the cache the first two filled.
  const auto plain = llm->generate({prompt}, test::greedy(2));
  EXPECT_GT(plain[0].num_cached_tokens, 0);
  EXPECT_TRUE(plain[0].prompt_logprobs.empty());
  llm->check_kv_cache_idle();
}

TEST(PromptLogprobs, MaxTokensZeroRunsThePromptOnly) {
  auto llm = make_llm();
  std::mt19937_64 rng(23);
  const auto prompt = test::random_tokens(rng, 40);
  const auto outs = llm->generate({prompt}, with_prompt_logprobs(2, 0));
  EXPECT_TRUE(outs[0].token_ids.empty());
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kLength);
  expect_matches_reference(outs[0].prompt_logprobs, prompt, 2);
  EXPECT_EQ(llm->last_stats().num_generated_tokens, 0);
  // Without prompt_logprobs, max_tokens == 0 still ends at once with nothing computed.
  EXPECT_TRUE(llm->generate({prompt}, test::greedy(0))[0].prompt_logprobs.empty());
  llm->check_kv_cache_idle();
}

TEST(PromptLogprobs, SamplesAndBatchNeighbours) {
  std::mt19937_64 rng(24);
  const auto asks = test::random_tokens(rng, 200);
  const auto other = test::random_tokens(rng, 90);
  auto llm = make_llm(/*max_batched_tokens=*/160);  // steps mix the two prompts' chunks
  SamplingParams two = with_prompt_logprobs(1, 4);
  two.n = 2;
  two.temperature = 0.8f;
  const std::vector<SamplingParams> params = {two, test::greedy(6)};
  const auto outs = llm->generate({asks, other}, params);
  ASSERT_EQ(outs[0].samples.size(), 2u);
  expect_matches_reference(outs[0].prompt_logprobs, asks, 1);
  EXPECT_TRUE(outs[1].prompt_logprobs.empty());
  // The neighbour's tokens are those it gets alone.
  auto alone = make_llm(160);
  EXPECT_EQ(outs[1].token_ids, alone->generate({other}, test::greedy(6))[0].token_ids);
  llm->check_kv_cache_idle();
}

TEST(PromptLogprobs, OutOfRangeIsRefused) {
  auto llm = make_llm();
  for (int bad : {-2, SamplingParams::kMaxLogprobs + 1}) {
    SamplingParams sp = test::greedy(1);
    sp.prompt_logprobs = bad;
    EXPECT_ERROR_HAS(llm->generate({std::vector<int32_t>{1, 2, 3}}, sp),
                     "prompt_logprobs must be -1 (off) or in [0, 20]");
  }
  // A one-token prompt has no entries.
  EXPECT_TRUE(
      llm->generate({std::vector<int32_t>{5}}, with_prompt_logprobs(3, 1))[0].prompt_logprobs.empty());
}

}  // namespace
}  // namespace kvattn
