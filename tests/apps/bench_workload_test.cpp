// `kvattn bench --workload`'s request sets (apps/bench_workload.h): sizes, the shared prefix,
// seeds, scaling, context caps; and the prefix workload's hit rate on the tiny Qwen3.
#include "bench_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/engine_test_util.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"

namespace kvattn::cli {
namespace {

constexpr int32_t kMaxId = 10000;
constexpr int64_t kBigContext = 1 << 20;

TEST(BenchWorkload, DefaultsAreTheIssues) {
  const WorkloadSpec nano = default_spec(WorkloadKind::kNanoVllm);
  EXPECT_EQ(nano.num_seqs, 256);
  EXPECT_EQ(nano.prefix_tokens, 0);
  EXPECT_EQ(nano.min_input, 100);
  EXPECT_EQ(nano.max_input, 1024);
  EXPECT_EQ(nano.min_output, 100);
  EXPECT_EQ(nano.max_output, 1024);
  const WorkloadSpec prefix = default_spec(WorkloadKind::kPrefix);
  EXPECT_EQ(prefix.num_seqs, 256);
  EXPECT_EQ(prefix.prefix_tokens, 2000);
  EXPECT_EQ(prefix.min_input, 100);
  EXPECT_EQ(prefix.max_input, 1024);
  EXPECT_EQ(prefix.min_output, 100);
  EXPECT_EQ(prefix.max_output, 1024);
  const WorkloadSpec lng = default_spec(WorkloadKind::kLong);
  EXPECT_EQ(lng.num_seqs, 32);
  EXPECT_EQ(lng.prefix_tokens, 0);
  EXPECT_EQ(lng.min_input, 8192);
  EXPECT_EQ(lng.max_input, 16384);
  EXPECT_EQ(lng.min_output, 512);
  EXPECT_EQ(lng.max_output, 512);
  EXPECT_EQ(lng.longest(), 16384 + 512);
}

TEST(BenchWorkload, NamesRoundTripAndBadOnesAreRefused) {
  for (WorkloadKind k : {WorkloadKind::kNanoVllm, WorkloadKind::kPrefix, WorkloadKind::kLong}) {
    EXPECT_EQ(parse_workload(workload_name(k)), k);
  }
  try {
    parse_workload("nano");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--workload"), std::string::npos) << e.what();
  }
}

TEST(BenchWorkload, ScaleMultipliesEverySizeAndKeepsOne) {
  const WorkloadSpec s = scaled(default_spec(WorkloadKind::kPrefix), 0.05);
  EXPECT_EQ(s.num_seqs, 13);  // 12.8
  EXPECT_EQ(s.prefix_tokens, 100);
  EXPECT_EQ(s.min_input, 5);
  EXPECT_EQ(s.max_input, 51);
  EXPECT_EQ(s.min_output, 5);
  EXPECT_EQ(s.max_output, 51);
  const WorkloadSpec tiny = scaled(default_spec(WorkloadKind::kLong), 1e-6);
  EXPECT_EQ(tiny.num_seqs, 1);
  EXPECT_EQ(tiny.min_input, 1);
  EXPECT_EQ(tiny.max_output, 1);
  EXPECT_EQ(scaled(default_spec(WorkloadKind::kNanoVllm), 0.5).prefix_tokens, 0);
  EXPECT_THROW(scaled(default_spec(WorkloadKind::kLong), 0.0), Error);
  EXPECT_THROW(scaled(default_spec(WorkloadKind::kLong), -1.0), Error);
}

TEST(BenchWorkload, BadSizesAreRefused) {
  WorkloadSpec s = default_spec(WorkloadKind::kNanoVllm);
  s.min_input = 10, s.max_input = 5;
  EXPECT_THROW(check_spec(s), Error);
  s = default_spec(WorkloadKind::kNanoVllm);
  s.num_seqs = 0;
  EXPECT_THROW(make_workload(s, 0, 0.6, kMaxId, kBigContext), Error);
  s = default_spec(WorkloadKind::kNanoVllm);
  s.min_output = 0;
  EXPECT_THROW(check_spec(s), Error);
}

void expect_sizes(const Workload& w, const WorkloadSpec& s) {
  ASSERT_EQ(static_cast<int64_t>(w.prompts.size()), s.num_seqs);
  ASSERT_EQ(w.params.size(), w.prompts.size());
  int64_t in = 0, out = 0;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const auto n = static_cast<int64_t>(w.prompts[i].size());
    EXPECT_GE(n, s.prefix_tokens + s.min_input);
    EXPECT_LE(n, s.prefix_tokens + s.max_input);
    EXPECT_GE(w.params[i].max_tokens, s.min_output);
    EXPECT_LE(w.params[i].max_tokens, s.max_output);
    EXPECT_TRUE(w.params[i].ignore_eos);
    EXPECT_FALSE(w.params[i].detokenize);
    for (int32_t t : w.prompts[i]) ASSERT_TRUE(t >= 0 && t < kMaxId) << t;
    in += n;
    out += w.params[i].max_tokens;
  }
  EXPECT_EQ(w.input_tokens, in);
  EXPECT_EQ(w.output_tokens, out);
}

TEST(BenchWorkload, PrefixWorkloadSharesItsSystemPromptAndNothingElse) {
  const WorkloadSpec s = default_spec(WorkloadKind::kPrefix);
  const Workload w = make_workload(s, 0, 0.6, kMaxId, kBigContext);
  expect_sizes(w, s);
  EXPECT_EQ(w.prefix_tokens, 2000);
  const std::vector<int32_t> prefix(w.prompts[0].begin(), w.prompts[0].begin() + 2000);
  std::set<std::vector<int32_t>> own;
  std::set<int64_t> lengths;
  for (const auto& p : w.prompts) {
    ASSERT_TRUE(std::equal(prefix.begin(), prefix.end(), p.begin()));
    own.insert(std::vector<int32_t>(p.begin() + 2000, p.begin() + 2008));
    lengths.insert(static_cast<int64_t>(p.size()));
  }
  EXPECT_EQ(own.size(), w.prompts.size());  // each prompt's own part is its own
  EXPECT_GT(lengths.size(), 100u);          // lengths drawn, not fixed
  EXPECT_GT(std::set<int32_t>(prefix.begin(), prefix.end()).size(), 1000u);  // random ids
}

TEST(BenchWorkload, LongWorkloadSizes) {
  const WorkloadSpec s = default_spec(WorkloadKind::kLong);
  const Workload w = make_workload(s, 0, 0.0, kMaxId, kBigContext);
  expect_sizes(w, s);
  EXPECT_EQ(w.output_tokens, 32 * 512);
  EXPECT_GE(w.input_tokens, 32 * 8192);
  EXPECT_EQ(w.params[0].temperature, 0.0f);
}

TEST(BenchWorkload, EveryRequestCarriesTheSamplingFilters) {
  const WorkloadSpec s = scaled(default_spec(WorkloadKind::kNanoVllm), 0.05);
  const Workload plain = make_workload(s, 3, 0.6, kMaxId, kBigContext);
  const Workload filtered = make_workload(s, 3, 0.8, kMaxId, kBigContext, 40, 0.9);
  ASSERT_EQ(plain.params.size(), filtered.params.size());
  for (size_t i = 0; i < plain.params.size(); ++i) {
    EXPECT_EQ(plain.params[i].top_k, 0);
    EXPECT_EQ(plain.params[i].top_p, 1.0f);
    EXPECT_EQ(filtered.params[i].temperature, 0.8f);
    EXPECT_EQ(filtered.params[i].top_k, 40);
    EXPECT_EQ(filtered.params[i].top_p, 0.9f);
    EXPECT_EQ(filtered.params[i].max_tokens, plain.params[i].max_tokens);  // same draws
  }
  EXPECT_EQ(filtered.prompts, plain.prompts);
}

TEST(BenchWorkload, SeedsReproduceAndDiffer) {
  const WorkloadSpec s = scaled(default_spec(WorkloadKind::kPrefix), 0.1);
  const Workload a = make_workload(s, 7, 0.6, kMaxId, kBigContext);
  const Workload b = make_workload(s, 7, 0.6, kMaxId, kBigContext);
  const Workload c = make_workload(s, 8, 0.6, kMaxId, kBigContext);
  EXPECT_EQ(a.prompts, b.prompts);
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].max_tokens, b.params[i].max_tokens);
  }
  EXPECT_NE(a.prompts, c.prompts);
  // Another seed draws another shared prompt too.
  EXPECT_FALSE(std::equal(a.prompts[0].begin(), a.prompts[0].begin() + a.prefix_tokens,
                          c.prompts[0].begin()));
}

// Without a shared prompt the draws are nano-vllm's bench.py order (every prompt's length
// then its ids, then every output length), as kvattn bench drew them before --workload.
TEST(BenchWorkload, NanoVllmDrawOrderIsUnchanged) {
  const WorkloadSpec s = scaled(default_spec(WorkloadKind::kNanoVllm), 0.1);
  const Workload w = make_workload(s, 0, 0.6, kMaxId, kBigContext);
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> id(0, kMaxId - 1);
  for (int64_t i = 0; i < s.num_seqs; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(s.min_input, s.max_input)(rng);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = id(rng);
    ASSERT_EQ(w.prompts[i], p) << "prompt " << i;
  }
  for (int64_t i = 0; i < s.num_seqs; ++i) {
    EXPECT_EQ(w.params[i].max_tokens,
              std::uniform_int_distribution<int64_t>(s.min_output, s.max_output)(rng));
  }
}

TEST(BenchWorkload, ContextCapsKeepThePrefixShared) {
  const WorkloadSpec s = default_spec(WorkloadKind::kPrefix);
  const Workload w = make_workload(s, 0, 0.6, kMaxId, 2048);
  EXPECT_EQ(w.prefix_tokens, 2000);
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const auto n = static_cast<int64_t>(w.prompts[i].size());
    EXPECT_LE(n, 2047);
    EXPECT_GE(w.params[i].max_tokens, 1);
    EXPECT_LE(n + w.params[i].max_tokens, 2048);
    EXPECT_TRUE(std::equal(w.prompts[0].begin(), w.prompts[0].begin() + 2000, w.prompts[i].begin()));
  }
  const Workload small = make_workload(s, 0, 0.6, kMaxId, 1000);
  EXPECT_EQ(small.prefix_tokens, 998);  // room for one own token and one output token
  for (const auto& p : small.prompts) EXPECT_EQ(p.size(), 999u);
}

// The prefix workload on the tiny Qwen3 (block 16): every request after the first admitted
// ones reads the shared prompt's full blocks from the cache; with the cache off nothing is
// served and the greedy tokens are the same.
TEST(BenchWorkload, PrefixHitRateOnTheTinyModel) {
  WorkloadSpec s = default_spec(WorkloadKind::kPrefix);
  s.num_seqs = 12;
  s.prefix_tokens = 200;  // 12 full blocks + 8 tokens
  s.min_input = 5, s.max_input = 60;
  s.min_output = 2, s.max_output = 6;
  const Workload w = make_workload(s, 5, 0.0, 320, 4096);
  LLMOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.max_num_batched_tokens = 256;  // the first step admits one prompt
  LLM llm(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
  const auto with_cache = test::tokens_of(llm.generate(w.prompts, w.params));
  const GenerationStats on = llm.last_stats();
  llm.check_kv_cache_idle();

  EXPECT_EQ(on.num_prompt_tokens, w.input_tokens);
  const int64_t shared_blocks = 200 / 16;
  // At most every request but the first hits the shared full blocks; at least the ones
  // admitted after the first step (the first takes the whole 256-token budget).
  EXPECT_LE(on.num_cached_tokens, (s.num_seqs - 1) * shared_blocks * 16);
  EXPECT_GE(on.num_cached_tokens, (s.num_seqs - 2) * shared_blocks * 16);
  EXPECT_NEAR(on.prefix_hit_rate(),
              static_cast<double>(on.num_cached_tokens) / static_cast<double>(w.input_tokens),
              1e-12);
  EXPECT_GT(on.prefix_hit_rate(), 0.5);

  llm.set_prefix_caching(false);
  const auto without = test::tokens_of(llm.generate(w.prompts, w.params));
  EXPECT_EQ(llm.last_stats().num_cached_tokens, 0);
  EXPECT_EQ(llm.last_stats().prefix_hit_rate(), 0.0);
  EXPECT_GT(llm.last_stats().num_prefill_tokens, on.num_prefill_tokens);
  EXPECT_EQ(without, with_cache);
  llm.check_kv_cache_idle();
}

}  // namespace
}  // namespace kvattn::cli
