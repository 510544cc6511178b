// The serving engine end to end on the tiny checkpoints (token ids, no tokenizer): greedy
// output under preemption, chunked prefill and requests arriving between steps equals each
// request run alone; parallel samples (n > 1) through fork; per-prompt SamplingParams; the
// step() API; and every KV block free afterwards.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "engine_test_util.h"

namespace kvattn {
namespace {

using test::checkpoint;
using test::greedy;
using test::random_tokens;
using test::tokens_of;

constexpr int64_t kBlockBytes = 32768;  // both tiny models: 16 tokens x 2 layers x K,V x 2 x 64 f32

class Serving : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<LLM> make(LLMOptions opt = {}) {
    if (opt.kv_cache_bytes == 0) opt.kv_cache_bytes = 256 * kBlockBytes;
    return std::make_unique<LLM>(load_hf_model(checkpoint(GetParam())), std::nullopt, opt);
  }
  // Each prompt alone on a roomy engine: the reference every schedule must reproduce.
  std::vector<std::vector<int32_t>> alone(const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<SamplingParams>& params) {
    auto llm = make();
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts.size(); ++i) {
      out.push_back(llm->generate({prompts[i]}, params[i])[0].token_ids);
    }
    return out;
  }
  std::vector<std::vector<int32_t>> prompts_of(std::mt19937_64& rng,
                                               std::initializer_list<size_t> lens) {
    std::vector<std::vector<int32_t>> p;
    for (size_t n : lens) p.push_back(random_tokens(rng, n));
    return p;
  }
};

TEST_P(Serving, PreemptionKeepsGreedyTokens) {
  std::mt19937_64 rng(11);
  const auto prompts = prompts_of(rng, {45, 20, 61, 33, 8, 50});
  std::vector<SamplingParams> params;
  for (int m : {30, 12, 25, 40, 33, 20}) params.push_back(greedy(m));
  const auto expect = alone(prompts, params);

  LLMOptions small;
  small.kv_cache_bytes = 10 * kBlockBytes;  // 160 tokens: the longest sequence needs 86
  auto llm = make(small);
  ASSERT_EQ(llm->kv_cache_tokens(), 160);
  EXPECT_EQ(tokens_of(llm->generate(prompts, params)), expect);
  const GenerationStats& s = llm->last_stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_EQ(s.num_generated_tokens, 30 + 12 + 25 + 40 + 33 + 20);
  llm->check_kv_cache_idle();
}

TEST_P(Serving, ChunkedPrefillMixedWithDecodeKeepsGreedyTokens) {
  std::mt19937_64 rng(12);
  const auto prompts = prompts_of(rng, {3, 90, 47, 130, 1, 66});
  const std::vector<SamplingParams> params(prompts.size(), greedy(14));
  const auto expect = alone(prompts, params);

  LLMOptions opt;
  opt.max_num_batched_tokens = 19;
  opt.max_num_seqs = 4;
  auto llm = make(opt);
  EXPECT_EQ(tokens_of(llm->generate(prompts, params)), expect);
  const GenerationStats& s = llm->last_stats();
  EXPECT_GT(s.num_partial_prefills, 0);
  EXPECT_GT(s.num_mixed_steps, 0);
  EXPECT_EQ(s.num_preemptions, 0);
  llm->check_kv_cache_idle();
}

// Chunking, preemption and arrivals between steps at once, driven through step().
TEST_P(Serving, RequestsArrivingBetweenStepsKeepGreedyTokens) {
  std::mt19937_64 rng(13);
  const auto prompts = prompts_of(rng, {70, 9, 33, 52, 17, 88, 26, 40});
  std::vector<SamplingParams> params;
  for (int m : {20, 35, 8, 27, 30, 16, 22, 31}) params.push_back(greedy(m));
  const auto expect = alone(prompts, params);

  LLMOptions opt;
  opt.kv_cache_bytes = 9 * kBlockBytes;  // 144 tokens: the longest sequence needs 104
  opt.max_num_batched_tokens = 24;
  opt.max_num_seqs = 5;
  auto llm = make(opt);
  std::vector<std::vector<int32_t>> got(prompts.size());
  std::vector<uint64_t> ids;
  size_t next = 0;
  int64_t steps = 0, preemptions = 0, partial = 0;
  while (next < prompts.size() || llm->has_unfinished_requests()) {
    if (next < prompts.size() && steps % 3 == 0) {  // one arrival every third step
      ids.push_back(llm->add_request(prompts[next], params[next]));
      EXPECT_EQ(ids.back(), ids.front() + next);
      ++next;
    }
    for (RequestOutput& o : llm->step()) got[o.request_id - ids.front()] = o.token_ids;
    preemptions = std::max(preemptions, llm->last_stats().num_preemptions);
    partial = std::max(partial, llm->last_stats().num_partial_prefills);
    ASSERT_LT(++steps, 5000);
  }
  EXPECT_EQ(got, expect);
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(partial, 0);
  EXPECT_TRUE(llm->step().empty());  // idle: nothing to do
  llm->check_kv_cache_idle();
}

// Greedy samples of one prompt are all the greedy completion; the prompt is computed once.
TEST_P(Serving, GreedyParallelSamplesEqualOneSample) {
  std::mt19937_64 rng(14);
  for (size_t len : {37, 32}) {  // a half-full last block (copied at fork) and a full one
    const auto prompt = random_tokens(rng, len);
    auto llm = make();
    const auto one = llm->generate({prompt}, greedy(20))[0];
    SamplingParams sp = greedy(20);
    sp.n = 4;
    const auto out = llm->generate({prompt}, sp)[0];
    ASSERT_EQ(out.samples.size(), 4u);
    for (const auto& c : out.samples) {
      EXPECT_EQ(c.token_ids, one.token_ids);
      EXPECT_EQ(c.finish_reason, FinishReason::kLength);
    }
    EXPECT_EQ(out.token_ids, one.token_ids);
    const GenerationStats& s = llm->last_stats();
    EXPECT_EQ(s.num_forks, 3);
    EXPECT_EQ(s.num_generated_tokens, 4 * 20);
    EXPECT_EQ(s.num_prefill_tokens + s.num_cached_tokens, static_cast<int64_t>(len));
    llm->check_kv_cache_idle();
  }
}

// Sample j of prompt i draws from stream i * n + j: with n = 2, sample 0 of the only prompt
// is stream 0 and sample 1 is stream 1, as are prompts 0 and 1 of an n = 1 call with the same
// prompt twice. Equality shows the forked samples read the right (copied) KV.
TEST_P(Serving, SampledParallelSamplesAreReproducibleAndForkCorrect) {
  std::mt19937_64 rng(15);
  const auto prompt = random_tokens(rng, 29);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 40;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  sp.seed = 77;
  auto llm = make();
  const auto pair = llm->generate({prompt, prompt}, sp);
  sp.n = 2;
  const auto forked = llm->generate({prompt}, sp)[0];
  ASSERT_EQ(forked.samples.size(), 2u);
  EXPECT_EQ(forked.samples[0].token_ids, pair[0].token_ids);
  EXPECT_EQ(forked.samples[1].token_ids, pair[1].token_ids);
  EXPECT_NE(forked.samples[0].token_ids, forked.samples[1].token_ids);
  EXPECT_EQ(llm->generate({prompt}, sp)[0].samples[1].token_ids, forked.samples[1].token_ids);
  sp.seed = 78;
  EXPECT_NE(llm->generate({prompt}, sp)[0].samples[1].token_ids, forked.samples[1].token_ids);
  llm->check_kv_cache_idle();
}

// Forks under a pool too small for every sample: children fall back to waiting or are
// preempted, and still produce the greedy completion.
TEST_P(Serving, ParallelSamplesUnderASmallPool) {
  std::mt19937_64 rng(16);
  const auto prompts = prompts_of(rng, {21, 40});
  const std::vector<SamplingParams> one(2, greedy(30));
  const auto expect = alone(prompts, one);
  SamplingParams sp = greedy(30);
  sp.n = 3;
  LLMOptions small;
  small.kv_cache_bytes = 12 * kBlockBytes;  // 6 samples need up to 30 blocks together
  auto llm = make(small);
  const auto outs = llm->generate(prompts, sp);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(outs[i].samples.size(), 3u);
    for (const auto& c : outs[i].samples) EXPECT_EQ(c.token_ids, expect[i]);
  }
  EXPECT_GT(llm->last_stats().num_preemptions, 0);
  llm->check_kv_cache_idle();
}

// A fork that finds no free block for its copy of the prompt's half-full last block waits
// and recomputes instead; its tokens are still the greedy completion.
TEST_P(Serving, ForkWithoutAFreeBlockFallsBackToRecompute) {
  std::mt19937_64 rng(18);
  const auto prompt = random_tokens(rng, 37);  // 3 blocks, the last one partly filled
  const auto expect = alone({prompt}, {greedy(20)})[0];
  SamplingParams sp = greedy(20);
  sp.n = 3;
  LLMOptions small;
  small.kv_cache_bytes = 4 * kBlockBytes;  // one spare block: one fork fits, the next not
  auto llm = make(small);
  const auto out = llm->generate({prompt}, sp)[0];
  ASSERT_EQ(out.samples.size(), 3u);
  for (const auto& c : out.samples) EXPECT_EQ(c.token_ids, expect);
  EXPECT_EQ(llm->last_stats().num_forks, 1);
  EXPECT_GT(llm->last_stats().num_preemptions, 0);
  llm->check_kv_cache_idle();
}

// A sequence that outgrows the whole pool ends (kLength) with the tokens it has; so do the
// samples of a prompt that could not fork.
TEST_P(Serving, SequenceOutgrowingThePoolEndsWithWhatItHas) {
  std::mt19937_64 rng(19);
  const auto prompt = random_tokens(rng, 30);
  const auto full = alone({prompt}, {greedy(10)})[0];
  // 2 blocks hold the KV of 32 tokens, so 30 + 3 tokens are reached: the 33rd needs a block.
  const std::vector<int32_t> fits(full.begin(), full.begin() + 3);
  LLMOptions tiny;
  tiny.kv_cache_bytes = 2 * kBlockBytes;
  auto llm = make(tiny);
  SamplingParams sp = greedy(10);
  for (int n : {1, 2}) {
    sp.n = n;
    const auto out = llm->generate({prompt}, sp)[0];
    ASSERT_EQ(out.samples.size(), static_cast<size_t>(n));
    for (const auto& c : out.samples) {
      EXPECT_EQ(c.token_ids, fits);
      EXPECT_EQ(c.finish_reason, FinishReason::kLength);
    }
    llm->check_kv_cache_idle();
  }
}

TEST_P(Serving, PerPromptParamsAndEvents) {
  std::mt19937_64 rng(17);
  const auto prompts = prompts_of(rng, {12, 30, 5});
  std::vector<SamplingParams> params = {greedy(3), greedy(9), greedy(0)};
  params[1].n = 2;
  auto llm = make();
  std::vector<std::vector<int>> events(3, std::vector<int>(2));
  std::vector<std::vector<int>> last(3, std::vector<int>(2));
  const auto outs = llm->generate(prompts, params, [&](const TokenEvent& e) {
    ASSERT_LT(e.index, 3u);
    ASSERT_LT(e.sample, 2u);
    if (e.token >= 0) events[e.index][e.sample]++;
    if (e.finished) last[e.index][e.sample]++;
  });
  EXPECT_EQ(outs[0].token_ids.size(), 3u);
  EXPECT_EQ(outs[1].samples.size(), 2u);
  EXPECT_EQ(outs[1].samples[1].token_ids.size(), 9u);
  EXPECT_TRUE(outs[2].token_ids.empty());
  EXPECT_EQ(outs[2].finish_reason, FinishReason::kLength);
  EXPECT_EQ(events, (std::vector<std::vector<int>>{{3, 0}, {9, 9}, {0, 0}}));
  EXPECT_EQ(last, (std::vector<std::vector<int>>{{1, 0}, {1, 1}, {1, 0}}));
  llm->check_kv_cache_idle();
}

TEST_P(Serving, RejectsBadRequestsAndMisuse) {
  auto llm = make();
  const std::vector<int32_t> p = {5, 6, 7};
  SamplingParams sp = greedy(4);
  sp.n = 0;
  EXPECT_THROW(llm->generate({p}, sp), Error);
  sp.n = 65;  // > max_num_seqs
  EXPECT_THROW(llm->add_request(p, sp), Error);
  sp = greedy(4);
  sp.detokenize = false;
  sp.stop = {"x"};
  EXPECT_THROW(llm->generate({p}, sp), Error);
  EXPECT_THROW(llm->generate({p, p}, std::vector<SamplingParams>{greedy(2)}), Error);
  EXPECT_FALSE(llm->has_unfinished_requests());
  llm->add_request(p, greedy(4));
  EXPECT_THROW(llm->generate({p}, greedy(2)), Error);  // busy
  while (llm->has_unfinished_requests()) llm->step();
  EXPECT_EQ(llm->generate({p}, greedy(2))[0].token_ids.size(), 2u);
  EXPECT_THROW(LLM(load_hf_model(checkpoint(GetParam())), std::nullopt,
                   LLMOptions{.gpu_memory_utilization = 1.5}),
               Error);
  llm->check_kv_cache_idle();
}

INSTANTIATE_TEST_SUITE_P(TinyCheckpoints, Serving, ::testing::Values("tiny_llama", "tiny_qwen3"));

}  // namespace
}  // namespace kvattn
