// Cascade decode on the CUDA model: sequences that share a cached 320-token prefix (prefix
// caching: the same blocks) decode teacher-forced for 12 steps; each step runs twice, built
// with and without BatchBuildOptions::cascade_min_prefix_blocks, and the two logit sets must
// agree within bf16 noise (the cascade merges two bf16 partial results); the cascade steps
// take the general (eager) path, graphs stay for the rest. Then the LLM: greedy with
// --cascade-min-prefix on a batch sharing a prefix counts cascade steps, leaks no block, and
// its first tokens equal the plain engine's. Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "kvattn/kernels/device_faults.h"
#include "teacher_forced.h"

namespace kvattn {
namespace {

using test::argmax;

class CascadeGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(CascadeGpu, TeacherForcedLogitsMatchThePlainDecode) {
  auto model = Model::create(load_hf_model(test::checkpoint(GetParam())), Device::cuda(0));
  const int64_t vocab = model->config().vocab_size, bs = 16, num_blocks = 256;
  model->allocate_kv_cache(num_blocks, bs);
  BlockManager bm(num_blocks, bs, /*enable_prefix_caching=*/true);
  BatchMetadataBuilder builder(bm);
  std::mt19937_64 rng(5);
  const auto prefix = test::random_tokens(rng, 320);
  std::vector<Sequence> seqs;
  seqs.reserve(6);
  std::vector<float> logits;
  auto forward = [&](const BatchMetadata& meta, const std::vector<int32_t>& rows) {
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    logits.assign(rows.size() * vocab, 0.0f);
    model->forward(in, logits);
  };
  // The prefix alone first (its 20 full blocks enter the prefix cache), then 5 prompts that
  // hit it, each prefilled alone.
  seqs.emplace_back(0, prefix);
  for (int s = 1; s <= 5; ++s) {
    auto p = prefix;
    const auto own = test::random_tokens(rng, static_cast<size_t>(3 + 7 * s));
    p.insert(p.end(), own.begin(), own.end());
    seqs.emplace_back(static_cast<SeqId>(s), p);
  }
  for (auto& s : seqs) {
    bm.allocate(s);
    const int64_t n = s.num_tokens() - s.num_computed_tokens();
    std::vector<ScheduledSequence> batch{{&s, n}};
    const BatchMetadata& meta = builder.build(batch);
    forward(meta, {static_cast<int32_t>(n - 1)});
    bm.mark_computed(s, n);
    s.append_token(argmax(logits.data(), vocab));
    bm.append(s);
  }
  for (int s = 1; s <= 5; ++s) EXPECT_EQ(seqs[s].num_cached_tokens(), 320);
  std::vector<Sequence*> decode;
  for (int s = 1; s <= 5; ++s) decode.push_back(&seqs[s]);
  BatchBuildOptions with;
  with.cascade_min_prefix_blocks = 4;
  double worst = 0;
  for (int step = 0; step < 12; ++step) {
    std::vector<ScheduledSequence> batch;
    std::vector<int32_t> rows;
    for (size_t i = 0; i < decode.size(); ++i) {
      batch.push_back({decode[i], 1});
      rows.push_back(static_cast<int32_t>(i));
    }
    const BatchMetadata& plain_meta = builder.build(batch);
    ASSERT_EQ(plain_meta.ctx.cascade_prefix_len, 0);
    forward(plain_meta, rows);
    const std::vector<float> plain = logits;
    const BatchMetadata& cascade_meta = builder.build(batch, with);
    ASSERT_EQ(cascade_meta.ctx.cascade_prefix_len, 320) << "step " << step;
    forward(cascade_meta, rows);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[i])) << "step " << step;
      scale = std::max(scale, std::abs(static_cast<double>(plain[i])));
      diff = std::max(diff, std::abs(static_cast<double>(plain[i]) - logits[i]));
    }
    worst = std::max(worst, diff / scale);
    for (size_t i = 0; i < decode.size(); ++i) {
      bm.mark_computed(*decode[i], 1);
      decode[i]->append_token(argmax(&plain[i * vocab], vocab));
      bm.append(*decode[i]);
    }
  }
  std::printf("[%s] cascade vs plain decode: max |diff| / max |logit| %.3e\n", GetParam().c_str(),
              worst);
  EXPECT_LT(worst, 2e-2);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
  for (auto& s : seqs) bm.free(s);
}

TEST_P(CascadeGpu, LlmCountsCascadeStepsAndLeaksNothing) {
  std::mt19937_64 rng(9);
  const auto prefix = test::random_tokens(rng, 400);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {2, 9, 31}) {
    auto p = prefix;
    const auto own = test::random_tokens(rng, static_cast<size_t>(n));
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> tokens[2];
  for (int on = 0; on < 2; ++on) {
    LLMOptions o = test::gpu_options();
    o.cascade_min_prefix_tokens = on ? 128 : 0;
    LLM llm(load_hf_model(test::checkpoint(GetParam())), std::nullopt, o);
    llm.generate({prefix}, test::greedy(1));
    tokens[on] = test::tokens_of(llm.generate(prompts, test::greedy(16)));
    if (on) {
      EXPECT_GT(llm.last_stats().num_cascade_steps, 5);
    } else {
      EXPECT_EQ(llm.last_stats().num_cascade_steps, 0);
    }
    EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    // The first token comes from the prefill, which the cascade does not touch.
    EXPECT_EQ(tokens[1][i][0], tokens[0][i][0]) << "prompt " << i;
    size_t same = 0;
    while (same < tokens[0][i].size() && tokens[1][i][same] == tokens[0][i][same]) ++same;
    std::printf("[%s] prompt %zu: %zu of %zu greedy tokens equal with the cascade\n",
                GetParam().c_str(), i, same, tokens[0][i].size());
  }
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CascadeGpu, ::testing::Values("tiny_qwen3", "tiny_llama"));

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) { return kvattn::test::gpu_test_main(argc, argv); }
