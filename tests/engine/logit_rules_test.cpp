// SamplingParams' allowed_token_ids, logit_bias and presence / frequency / repetition
// penalties: LogitRules
// against the definition on random rows, and the LLM's greedy tokens under them against the
// adjusted argmax of the model's own logits, teacher-forced over the same tokens (tiny_llama).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling/logit_rules.h"
#include "hf_reference.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

using test::Case;
using test::load_cases;
using test::tiny_dir;

// vLLM's definitions, written out: the logit bias; then repetition on prompt and output
// tokens, frequency and presence on output tokens.
std::vector<float> penalised(std::vector<float> row, const SamplingParams& p,
                             const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& output) {
  for (const auto& [token, bias] : p.logit_bias) row[static_cast<size_t>(token)] += bias;
  std::map<int32_t, int> count;
  for (int32_t t : output) ++count[t];
  for (size_t t = 0; t < row.size(); ++t) {
    const auto id = static_cast<int32_t>(t);
    const bool seen = count.count(id) != 0 ||
                      std::find(prompt.begin(), prompt.end(), id) != prompt.end();
    if (seen) {
      row[t] = row[t] > 0 ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
    }
    if (count.count(id) != 0) {
      row[t] -= p.frequency_penalty * static_cast<float>(count[id]) + p.presence_penalty;
    }
  }
  return row;
}

TEST(LogitRules, FollowTheDefinition) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    SamplingParams p;
    p.presence_penalty = static_cast<float>(trial % 5) * 0.5f - 1.0f;
    p.frequency_penalty = static_cast<float>(trial % 3) * 0.7f - 0.7f;
    p.repetition_penalty = trial % 4 == 0 ? 1.0f : 0.6f + 0.2f * static_cast<float>(trial % 4);
    if (!p.has_penalties()) p.repetition_penalty = 1.3f;
    if (trial % 2 == 1) p.logit_bias = {{3, 5.0f}, {70, -100.0f}, {3, 1.5f}, {99, 0.25f}};
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>(rng() % 64));
    LogitRules tp(p, prompt);
    ASSERT_TRUE(tp.active());
    for (int i = 0; i < 30; ++i) {
      output.push_back(static_cast<int32_t>(rng() % 100));
      tp.on_generated(output.back());
    }
    std::vector<float> row(100);
    for (float& x : row) x = nd(rng);
    std::vector<float> got = row;
    tp.apply(got);
    const std::vector<float> want = penalised(row, p, prompt, output);
    for (size_t t = 0; t < row.size(); ++t) EXPECT_EQ(got[t], want[t]) << "token " << t;
  }
  SamplingParams none;
  EXPECT_FALSE(LogitRules(none, std::vector<int32_t>{1, 2}).active());
  SamplingParams bias_only;
  bias_only.logit_bias = {{1, -3.0f}};
  LogitRules b(bias_only, std::vector<int32_t>{1, 2});
  ASSERT_TRUE(b.active());
  b.on_generated(1);  // no penalties: nothing counts
  std::vector<float> row = {1.0f, 1.0f, 1.0f};
  b.apply(row);
  EXPECT_EQ(row, (std::vector<float>{1.0f, -2.0f, 1.0f}));
}

TEST(LogitRules, ParamsAreChecked) {
  for (auto edit : std::vector<void (*)(SamplingParams&)>{
           [](SamplingParams& p) { p.presence_penalty = 2.5f; },
           [](SamplingParams& p) { p.frequency_penalty = -2.5f; },
           [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
           [](SamplingParams& p) { p.repetition_penalty = NAN; },
           [](SamplingParams& p) { p.logit_bias = {{4, 100.5f}}; },
           [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; },
           [](SamplingParams& p) { p.min_tokens = -1; },
           [](SamplingParams& p) { p.min_tokens = p.max_tokens + 1; }}) {
    SamplingParams p;
    edit(p);
    EXPECT_THROW(validate(p), Error);
  }
}

// min_tokens: the stop ids and (without ignore_eos) the end ids are masked until that many
// tokens were generated, then the rules go quiet (no host draws on CUDA after it).
TEST(LogitRules, MinTokensHoldsTheEndIdsBack) {
  SamplingParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos = {3};
  LogitRules rules(p, std::vector<int32_t>{1, 2}, eos);
  EXPECT_TRUE(rules.active());
  std::vector<float> row(10, 0.5f);
  rules.apply(row);
  EXPECT_EQ(row[7], -INFINITY);
  EXPECT_EQ(row[3], -INFINITY);
  EXPECT_EQ(row[4], 0.5f);
  rules.on_generated(4);
  EXPECT_TRUE(rules.holding());
  rules.on_generated(5);
  EXPECT_FALSE(rules.holding());
  EXPECT_FALSE(rules.active());
  std::vector<float> after(10, 0.5f);
  rules.apply(after);
  EXPECT_EQ(after[7], 0.5f);
  // ignore_eos: only the stop ids are held; no min_tokens: nothing.
  p.ignore_eos = true;
  LogitRules no_eos(p, {}, eos);
  std::vector<float> r2(10, 0.5f);
  no_eos.apply(r2);
  EXPECT_EQ(r2[3], 0.5f);
  EXPECT_EQ(r2[7], -INFINITY);
  p.min_tokens = 0;
  EXPECT_FALSE(LogitRules(p, {}, eos).active());
}

// allowed_token_ids: every other id is -inf (unsorted, repeated and past-the-row ids
// included), before the bias and the penalties, which still apply to the allowed ids.
TEST(LogitRules, AllowedTokenIdsMaskEveryOtherId) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t vocab = 1 + rng() % 90;
    SamplingParams p;
    const size_t count = 1 + rng() % 12;
    for (size_t i = 0; i < count; ++i) {
      p.allowed_token_ids.push_back(static_cast<int32_t>(rng() % 100));
    }
    if (trial % 3 == 0) p.logit_bias = {{static_cast<int32_t>(rng() % vocab), 3.0f}};
    if (trial % 4 == 1) p.repetition_penalty = 1.7f;
    const std::vector<int32_t> prompt = {0, static_cast<int32_t>(rng() % vocab)};
    LogitRules rules(p, prompt);
    ASSERT_TRUE(rules.active());
    std::vector<float> row(vocab);
    for (float& x : row) x = nd(rng);
    std::vector<float> got = row;
    rules.apply(got);
    SamplingParams rest = p;
    rest.allowed_token_ids.clear();
    const std::vector<float> want = penalised(row, rest, prompt, {});
    for (size_t t = 0; t < vocab; ++t) {
      const bool allowed = std::find(p.allowed_token_ids.begin(), p.allowed_token_ids.end(),
                                     static_cast<int32_t>(t)) != p.allowed_token_ids.end();
      EXPECT_EQ(got[t], allowed ? want[t] : -INFINITY) << "trial " << trial << " token " << t;
    }
  }
  SamplingParams negative;
  negative.allowed_token_ids = {3, -1};
  EXPECT_THROW(validate(negative), Error);
}

// bad_words_ids (vLLM's): a one-token word is always -inf; a longer word's last token is -inf
// only right after the output ends with the rest of the word.
TEST(LogitRules, BadWordsBanTheirLastTokenAfterTheRest) {
  SamplingParams p;
  p.bad_words_ids = {{7}, {3, 4, 5}, {9, 9}};
  LogitRules rules(p, std::vector<int32_t>{3, 4});  // the prompt does not count
  ASSERT_TRUE(rules.active());
  auto row_after = [&](std::vector<int32_t> generated) {
    LogitRules r(p, std::vector<int32_t>{3, 4});
    for (int32_t t : generated) r.on_generated(t);
    std::vector<float> row(12, 1.0f);
    r.apply(row);
    std::vector<int32_t> banned;
    for (size_t t = 0; t < row.size(); ++t) {
      if (row[t] == -INFINITY) banned.push_back(static_cast<int32_t>(t));
      else EXPECT_EQ(row[t], 1.0f);
    }
    return banned;
  };
  EXPECT_EQ(row_after({}), (std::vector<int32_t>{7}));
  EXPECT_EQ(row_after({1, 3, 4}), (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(row_after({3, 4, 1}), (std::vector<int32_t>{7}));
  EXPECT_EQ(row_after({9}), (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(row_after({3, 4, 9}), (std::vector<int32_t>{7, 9}));
  SamplingParams bad;
  bad.bad_words_ids = {{}};
  EXPECT_THROW(validate(bad), Error);
  bad.bad_words_ids = {{2, -1}};
  EXPECT_THROW(validate(bad), Error);
}

LLMOptions small_pool() {
  LLMOptions o;
  o.kv_cache_bytes = 1 << 20;
  return o;
}

// The LLM's greedy tokens with penalties, checked step by step: each is the argmax of the
// penalised logits the model gives for the tokens before it.
TEST(LLMPenalties, GreedyTokensAreThePenalisedArgmax) {
  const auto cases = load_cases("llama");
  for (int variant = 0; variant < 4; ++variant) {
    SamplingParams sp;
    sp.max_tokens = 24;
    sp.ignore_eos = true;
    if (variant == 0) sp.repetition_penalty = 1.5f;
    if (variant == 1) sp.frequency_penalty = 1.5f;
    if (variant == 2) {
      sp.presence_penalty = 1.0f;
      sp.repetition_penalty = 0.8f;  // < 1 favours repeats: the other direction
    }
    if (variant == 3) {  // a bias alone: ban each prompt's first greedy token, lift another
      sp.logit_bias = {{cases[0].greedy[0], -100.0f}, {cases[1].greedy[0], -100.0f},
                       {cases[2].greedy[0], -100.0f}, {cases[3].greedy[0], -100.0f},
                       {17, 4.0f}};
    }
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& c : cases) prompts.push_back(c.prompt);
    LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
    const auto outs = llm.generate(prompts, sp);
    const auto plain = [&] {
      SamplingParams q = sp;
      q.presence_penalty = q.frequency_penalty = 0.0f;
      q.repetition_penalty = 1.0f;
      q.logit_bias.clear();
      return llm.generate(prompts, q);
    }();
    for (const auto& [token, bias] : sp.logit_bias) {
      if (bias > -100.0f) continue;
      for (const auto& o : outs) {
        EXPECT_EQ(std::count(o.token_ids.begin(), o.token_ids.end(), token), 0)
            << "banned token " << token << " was generated";
      }
    }
    // Teacher-forced over the penalised run's tokens: the model's raw logits at every step.
    std::vector<Case> forced;
    for (size_t i = 0; i < cases.size(); ++i) forced.push_back({cases[i].prompt, outs[i].token_ids, {}});
    auto model = Model::create(load_hf_model(tiny_dir("llama")), Device::cpu());
    size_t differs_from_plain = 0;
    test::teacher_forced_steps(*model, forced, 16, 4096, [&](size_t i, size_t step, const float* l) {
      std::vector<float> row(l, l + model->config().vocab_size);
      const std::vector<int32_t> before(outs[i].token_ids.begin(),
                                        outs[i].token_ids.begin() + static_cast<long>(step));
      const std::vector<float> pen = penalised(row, sp, cases[i].prompt, before);
      const auto best = static_cast<int32_t>(std::max_element(pen.begin(), pen.end()) - pen.begin());
      EXPECT_EQ(outs[i].token_ids[step], best) << "prompt " << i << " step " << step;
    });
    for (size_t i = 0; i < cases.size(); ++i) differs_from_plain += outs[i].token_ids != plain[i].token_ids;
    EXPECT_GT(differs_from_plain, 0u) << "the penalties changed nothing";
    EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
  }
}

// The LLM with min_tokens: a stop id the free greedy run generates second ends it there
// without min_tokens; with min_tokens = 5 the output has at least 5 tokens, none of the first
// 5 the stop id, and the tokens before the first forced change are the free run's.
TEST(LLMMinTokens, StopIdsWaitForMinTokens) {
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  const RequestOutput free_run = llm.generate({prompt}, sp)[0];
  ASSERT_EQ(free_run.token_ids.size(), 12u);
  sp.stop_token_ids = {free_run.token_ids[1]};
  const RequestOutput stopped = llm.generate({prompt}, sp)[0];
  EXPECT_LE(stopped.token_ids.size(), 1u);
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  sp.min_tokens = 5;
  const RequestOutput held = llm.generate({prompt}, sp)[0];
  ASSERT_GE(held.token_ids.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NE(held.token_ids[i], sp.stop_token_ids[0]) << i;
  EXPECT_EQ(held.token_ids[0], free_run.token_ids[0]);
  if (held.token_ids.size() < 12) EXPECT_EQ(held.finish_reason, FinishReason::kStop);
  llm.check_kv_cache_idle();
}

// The LLM with allowed_token_ids: greedy picks, teacher-forced, the best allowed id at every
// step; an id past the vocabulary is refused naming the field.
TEST(LLMAllowedTokenIds, GreedyTokensAreTheBestAllowed) {
  const auto cases = load_cases("llama");
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  sp.allowed_token_ids = {40, 7, 300, 7, 123, 5};
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : cases) prompts.push_back(c.prompt);
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  const auto outs = llm.generate(prompts, sp);
  std::vector<Case> forced;
  for (size_t i = 0; i < cases.size(); ++i) forced.push_back({cases[i].prompt, outs[i].token_ids, {}});
  auto model = Model::create(load_hf_model(tiny_dir("llama")), Device::cpu());
  size_t steps = 0;
  test::teacher_forced_steps(*model, forced, 16, 4096, [&](size_t i, size_t step, const float* l) {
    int32_t best = -1;
    for (int32_t a : sp.allowed_token_ids) {
      if (best < 0 || l[a] > l[best] || (l[a] == l[best] && a < best)) best = a;
    }
    EXPECT_EQ(outs[i].token_ids[step], best) << "prompt " << i << " step " << step;
    ++steps;
  });
  EXPECT_EQ(steps, cases.size() * 12);
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
  sp.allowed_token_ids = {5, 320};
  try {
    llm.generate({std::vector<int32_t>{5, 6}}, sp);
    ADD_FAILURE() << "token 320 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allowed_token_ids holds 320, outside the vocabulary"),
              std::string::npos)
        << e.what();
  }
  llm.check_kv_cache_idle();
}

TEST(LLMLogitBias, IdsOutsideTheVocabularyAreRefused) {
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  SamplingParams sp;
  sp.max_tokens = 2;
  sp.logit_bias = {{320, 1.0f}};
  try {
    llm.generate({std::vector<int32_t>{5, 6}}, sp);
    ADD_FAILURE() << "token 320 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias names token 320, outside the vocabulary"),
              std::string::npos)
        << e.what();
  }
  llm.check_kv_cache_idle();
}

// A seeded, penalised request draws the same tokens alone and beside others (its draws do
// not depend on the batch), and n = 2 samples keep their own counts.
TEST(LLMPenalties, SeededDrawsDoNotDependOnTheBatch) {
  const auto cases = load_cases("llama");
  SamplingParams sp;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  sp.temperature = 0.9f;
  sp.seed = 7;
  sp.n = 2;
  sp.frequency_penalty = 0.8f;
  sp.repetition_penalty = 1.2f;
  LLM llm(load_hf_model(tiny_dir("llama")), std::nullopt, small_pool());
  const auto alone = llm.generate({cases[1].prompt}, sp);
  SamplingParams other;
  other.max_tokens = 16;
  other.ignore_eos = true;
  std::vector<SamplingParams> both = {sp, other};
  const auto together = llm.generate({cases[1].prompt, cases[3].prompt}, both);
  ASSERT_EQ(alone[0].samples.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(alone[0].samples[j].token_ids, together[0].samples[j].token_ids) << "sample " << j;
  }
  EXPECT_NE(alone[0].samples[0].token_ids, alone[0].samples[1].token_ids);
}

}  // namespace
}  // namespace kvattn
