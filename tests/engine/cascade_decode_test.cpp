// Cascade decode through the engine on the CPU (LLMOptions::cascade_min_prefix_tokens): a batch
// of requests sharing a cached 300-token prompt prefix decodes in the cascade form (the
// shared blocks read once per step) and gives the greedy tokens of the same engine with it
// off, on the tiny Llama and Qwen3 checkpoints; the steps are counted; nothing leaks; and
// below the threshold (and by default, on the CPU) nothing changes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/llm.h"

namespace kvattn {
namespace {

using test::greedy;
using test::random_tokens;
using test::tokens_of;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  GenerationStats stats;
  int64_t used_blocks = 0;
};

// Warms the prefix cache with the prefix alone, then generates every prompt in one batch.
Outcome run(const std::string& checkpoint, int64_t cascade_tokens,
        const std::vector<int32_t>& prefix, const std::vector<std::vector<int32_t>>& prompts) {
  LLMOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.cascade_min_prefix_tokens = cascade_tokens;
  LLM llm(load_hf_model(test::checkpoint(checkpoint)), std::nullopt, o);
  llm.generate({prefix}, greedy(1));
  Outcome r;
  r.tokens = tokens_of(llm.generate(prompts, greedy(12)));
  r.stats = llm.last_stats();
  r.used_blocks = llm.cache_stats().num_used_blocks;
  return r;
}

class CascadeDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(CascadeDecode, GreedyTokensEqualThePlainDecode) {
  std::mt19937_64 rng(11);
  const auto prefix = random_tokens(rng, 300);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 5, 17, 40, 3}) {
    auto p = prefix;
    const auto own = random_tokens(rng, static_cast<size_t>(n));
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(p);
  }
  const Outcome plain = run(GetParam(), 0, prefix, prompts);
  const Outcome cascade = run(GetParam(), 64, prefix, prompts);
  EXPECT_EQ(plain.stats.num_cascade_steps, 0);
  EXPECT_GT(cascade.stats.num_cascade_steps, 5) << "the shared prefix was not used";
  EXPECT_GE(cascade.stats.num_cached_tokens, 4 * 288) << "the prompts did not share the cache";
  EXPECT_EQ(cascade.tokens, plain.tokens);
  EXPECT_EQ(cascade.used_blocks, 0);
  // A threshold above the shared length: the plain decode.
  const Outcome above = run(GetParam(), 400, prefix, prompts);
  EXPECT_EQ(above.stats.num_cascade_steps, 0);
  EXPECT_EQ(above.tokens, plain.tokens);
  // The default (kCascadeAuto) is off on the CPU.
  const Outcome automatic = run(GetParam(), LLMOptions::kCascadeAuto, prefix, prompts);
  EXPECT_EQ(automatic.stats.num_cascade_steps, 0);
  EXPECT_EQ(automatic.tokens, plain.tokens);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CascadeDecode, ::testing::Values("tiny_llama", "tiny_qwen3"));

TEST(CascadeDecodeOptions, AutoThresholdScalesWithTheKvBytesOfAToken) {
  ModelConfig c;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  EXPECT_EQ(cascade_auto_min_saved_tokens(c), 32768);  // Qwen3-0.6B, where it was measured
  c.num_kv_heads = 3;
  c.head_dim = 64;
  EXPECT_EQ(cascade_auto_min_saved_tokens(c), 174763);  // SmolLM2: ceil(32768 * 1024 / 192)
  c.num_kv_heads = 16;
  c.head_dim = 256;
  EXPECT_EQ(cascade_auto_min_saved_tokens(c), 8192);
}

TEST(CascadeDecodeOptions, NegativeThresholdIsRejected) {
  LLMOptions o;
  o.kv_cache_bytes = 4 << 20;
  o.cascade_min_prefix_tokens = LLMOptions::kCascadeAuto - 1;
  EXPECT_THROW(LLM(load_hf_model(test::checkpoint("tiny_llama")), std::nullopt, o), Error);
}

}  // namespace
}  // namespace kvattn
