// Shared by the tensor-parallel GPU tests: runs prompts through a Model step by step (a
// prefill step, then decode steps fed with a reference's greedy tokens, so both models see
// the same inputs), collecting the logits of every step.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "engine_test_util.h"

namespace kvattn::tp_test {

inline std::string tiny_qwen3_dir() { return test::checkpoint("tiny_qwen3"); }

inline std::vector<std::vector<int32_t>> random_prompts(uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t len : {1, 9, 40, 17}) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = tok(rng);
    prompts.push_back(p);
  }
  return prompts;
}

// logits[step][seq] for `steps` steps; `feed` (if not empty) gives the token appended after
// each step (feed[step][seq]); otherwise each model's own argmax is appended.
struct Run {
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<int32_t>> argmax;
};

inline Run run_steps(Model& m, const std::vector<std::vector<int32_t>>& prompts, int steps,
                     const std::vector<std::vector<int32_t>>& feed = {}) {
  const int64_t V = m.config().vocab_size, bs = 16, blocks = 256;
  m.allocate_kv_cache(blocks, bs);
  BlockManager bm(blocks, bs, false);
  BatchMetadataBuilder builder(bm);
  std::vector<Sequence> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.emplace_back(static_cast<SeqId>(i), prompts[i]);
    bm.allocate(seqs.back());
  }
  Run run;
  for (int s = 0; s < steps; ++s) {
    std::vector<ScheduledSequence> batch;
    std::vector<int32_t> rows;
    int64_t row = 0;
    for (auto& q : seqs) {
      const int64_t n = q.num_uncomputed_tokens();
      batch.push_back({&q, n});
      row += n;
      rows.push_back(static_cast<int32_t>(row - 1));
    }
    const BatchMetadata& meta = builder.build(batch);
    std::vector<float> logits(rows.size() * V, NAN);
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    m.forward(in, logits);
    std::vector<std::vector<float>> step_logits;
    std::vector<int32_t> step_argmax;
    for (size_t i = 0; i < seqs.size(); ++i) {
      bm.mark_computed(seqs[i], batch[i].num_new_tokens);
      std::vector<float> l(logits.begin() + i * V, logits.begin() + (i + 1) * V);
      step_argmax.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
      step_logits.push_back(std::move(l));
      seqs[i].append_token(feed.empty() ? step_argmax.back() : feed[s][i]);
      bm.append(seqs[i]);
    }
    run.logits.push_back(std::move(step_logits));
    run.argmax.push_back(std::move(step_argmax));
  }
  for (auto& q : seqs) bm.free(q);
  return run;
}

}  // namespace kvattn::tp_test
