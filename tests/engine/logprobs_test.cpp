// SamplingParams::logprobs: each generated token's log-probability under the model and the
// most likely alternatives (token_logprobs), through the LLM, its token events and n > 1
// samples, against HF's float32 logits of tiny_llama (tests/data/tiny_llama/expected.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hf_reference.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

using test::load_cases;
using test::tiny_dir;

// log_softmax(row)[i] in long double: the reference.
long double ref_logprob(const std::vector<float>& row, size_t i) {
  long double m = -INFINITY;
  for (float x : row) m = std::max<long double>(m, x);
  long double s = 0;
  for (float x : row) s += std::exp(static_cast<long double>(x) - m);
  return static_cast<long double>(row[i]) - m - std::log(s);
}

TEST(TokenLogprobs, MatchesTheReferenceAndRanksTheTop) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t v = 1 + rng() % 5000;
    std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>(trial));
    std::vector<float> row(v);
    for (float& x : row) x = nd(rng);
    // Ties: copy a few values, so equal logits must come out lowest id first.
    for (int k = 0; k < 5 && v > 1; ++k) row[rng() % v] = row[rng() % v];
    const auto token = static_cast<int32_t>(rng() % v);
    const int top_n = static_cast<int>(rng() % (SamplingParams::kMaxLogprobs + 1));
    const TokenLogprobs lp = token_logprobs(row, token, top_n);
    EXPECT_NEAR(lp.logprob, static_cast<double>(ref_logprob(row, token)), 1e-5);
    ASSERT_EQ(lp.top.size(), std::min<size_t>(top_n, v));
    // The reference ranking: logit descending, id ascending.
    std::vector<int32_t> ids(v);
    for (size_t i = 0; i < v; ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (size_t k = 0; k < lp.top.size(); ++k) {
      EXPECT_EQ(lp.top[k].token, ids[k]) << "rank " << k << " of trial " << trial;
      EXPECT_NEAR(lp.top[k].logprob, static_cast<double>(ref_logprob(row, ids[k])), 1e-5);
    }
  }
}

TEST(TokenLogprobs, EdgeRows) {
  // A masked (-inf) entry has log-probability -inf; the others still sum to 1.
  const float inf = std::numeric_limits<float>::infinity();
  const TokenLogprobs m = token_logprobs(std::vector<float>{0.0f, -inf, 0.0f}, 1, 3);
  EXPECT_EQ(m.logprob, -inf);
  ASSERT_EQ(m.top.size(), 3u);
  EXPECT_EQ(m.top[0].token, 0);
  EXPECT_EQ(m.top[1].token, 2);
  EXPECT_NEAR(m.top[0].logprob, std::log(0.5), 1e-7);
  EXPECT_EQ(m.top[2].token, 1);
  // Huge logits do not overflow (log-sum-exp from the maximum).
  const TokenLogprobs h = token_logprobs(std::vector<float>{1e30f, 1e30f}, 0, 0);
  EXPECT_NEAR(h.logprob, std::log(0.5), 1e-7);
  // A NaN logit: NaN log-probabilities, not a plausible-looking number.
  EXPECT_TRUE(std::isnan(token_logprobs(std::vector<float>{1.0f, NAN}, 0, 1).logprob));
  EXPECT_THROW(token_logprobs(std::vector<float>{1.0f}, 1, 0), Error);
  EXPECT_THROW(token_logprobs(std::vector<float>{1.0f}, 0, SamplingParams::kMaxLogprobs + 1),
               Error);
  EXPECT_THROW(token_logprobs(std::vector<float>{}, 0, 0), Error);
}

TEST(TokenLogprobs, SamplingParamsRange) {
  SamplingParams p;
  for (int n : {-1, 0, 5, SamplingParams::kMaxLogprobs}) {
    p.logprobs = n;
    EXPECT_NO_THROW(validate(p)) << n;
  }
  for (int n : {-2, SamplingParams::kMaxLogprobs + 1}) {
    p.logprobs = n;
    try {
      validate(p);
      ADD_FAILURE() << "logprobs " << n << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("logprobs must be -1 (off) or in [0, 20]"),
                std::string::npos)
          << e.what();
    }
  }
}

LLMOptions small_pool() {
  LLMOptions o;
  o.kv_cache_bytes = 1 << 20;
  return o;
}

// Greedy through the LLM: every token's log-probability is HF's log_softmax at that step
// (the CPU model matches HF's logits to ~1e-6), and the greedy token heads its top list.
TEST(LLMLogprobs, GreedyTokensCarryHFsLogProbabilities) {
  const auto cases = load_cases("llama");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : cases) prompts.push_back(c.prompt);
  SamplingParams sp;
  sp.max_tokens = static_cast<int>(cases[0].greedy.size());
  sp.ignore_eos = true;
  sp.logprobs = 3;
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  std::vector<std::vector<TokenLogprobs>> streamed(cases.size());
  const auto outs = llm.generate(prompts, sp, [&](const TokenEvent& e) {
    if (e.token >= 0) {
      ASSERT_NE(e.logprobs, nullptr);
      streamed[e.index].push_back(*e.logprobs);
    } else {
      EXPECT_EQ(e.logprobs, nullptr);
    }
  });
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("prompt " + std::to_string(c));
    ASSERT_EQ(outs[c].token_ids, cases[c].greedy);
    ASSERT_EQ(outs[c].logprobs.size(), outs[c].token_ids.size());
    ASSERT_EQ(streamed[c].size(), outs[c].token_ids.size());
    for (size_t t = 0; t < outs[c].token_ids.size(); ++t) {
      const TokenLogprobs& lp = outs[c].logprobs[t];
      const int32_t tok = outs[c].token_ids[t];
      EXPECT_NEAR(lp.logprob, static_cast<double>(ref_logprob(cases[c].logits[t], tok)), 1e-4)
          << "step " << t;
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.top[0].token, tok);
      EXPECT_EQ(lp.top[0].logprob, lp.logprob);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
      EXPECT_EQ(streamed[c][t].logprob, lp.logprob);
    }
  }
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
}

// Sampled tokens (temperature 1.5, n = 2): the raw distribution's log-probability of each
// drawn token (not the tempered one), one entry per output token, none for a stop token;
// asking for logprobs does not change which tokens are drawn.
TEST(LLMLogprobs, SampledTokensAndStopTokens) {
  const auto cases = load_cases("llama");
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.temperature = 1.5f;
  sp.seed = 99;
  sp.n = 2;
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  sp.ignore_eos = true;  // stop_token_ids still stop
  const auto plain = llm.generate({cases[2].prompt}, sp);
  ASSERT_EQ(plain[0].samples.size(), 2u);
  sp.logprobs = 0;
  sp.stop_token_ids = {plain[0].samples[1].token_ids.at(5)};  // sample 1 stops at its 6th token
  const auto with = llm.generate({cases[2].prompt}, sp);
  ASSERT_EQ(with[0].samples.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    const CompletionOutput& o = with[0].samples[j];
    ASSERT_EQ(o.logprobs.size(), o.token_ids.size()) << "sample " << j;
    for (const TokenLogprobs& lp : o.logprobs) {
      EXPECT_TRUE(lp.top.empty());
      EXPECT_LE(lp.logprob, 0.0f);
      EXPECT_TRUE(std::isfinite(lp.logprob));
    }
    const auto& a = plain[0].samples[j].token_ids;
    EXPECT_TRUE(std::equal(o.token_ids.begin(), o.token_ids.end(), a.begin()))
        << "sample " << j << ": logprobs changed the draws";
  }
  EXPECT_EQ(with[0].samples[1].finish_reason, FinishReason::kStop);
  EXPECT_LE(with[0].samples[1].token_ids.size(), 5u);
  // The log-probability of a drawn token is the raw model's: recompute it with a greedy
  // teacher-forced pass over the same tokens (a prompt extended by the drawn prefix).
  const CompletionOutput& s0 = with[0].samples[0];
  std::vector<int32_t> prefix = cases[2].prompt;
  SamplingParams one;
  one.max_tokens = 1;
  one.ignore_eos = true;
  one.logprobs = SamplingParams::kMaxLogprobs;
  for (size_t t = 0; t < std::min<size_t>(s0.token_ids.size(), 4); ++t) {
    const auto g = llm.generate({prefix}, one);
    const auto& top = g[0].logprobs.at(0).top;
    const auto it = std::find_if(top.begin(), top.end(),
                                 [&](const TokenLogprob& x) { return x.token == s0.token_ids[t]; });
    if (it != top.end()) {
      EXPECT_NEAR(it->logprob, s0.logprobs[t].logprob, 1e-5) << "token " << t;
    } else {
      EXPECT_LE(s0.logprobs[t].logprob, top.back().logprob) << "token " << t;
    }
    prefix.push_back(s0.token_ids[t]);
  }
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
}

}  // namespace
}  // namespace kvattn
