// Teacher-forced greedy comparison of models on the CPU engine path, shared by the engine tests
// that compare a model variant (weight format, KV-cache dtype) against a reference model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/model.h"

namespace kvattn::test {

inline int32_t argmax(const float* l, int64_t n) {
  return static_cast<int32_t>(std::max_element(l, l + n) - l);
}

// Top-1 minus top-2 logit.
inline float margin(const float* l, int64_t n) {
  std::vector<float> v(l, l + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

// Runs every model on the same steps (one prefill of all prompts, then `steps` decode steps),
// feeding each sequence the argmax of models[0]. Returns logits[model][step][prompt][vocab].
// split_prefill: the prefill runs as two chunks, the first half of each prompt (at least one
// token) and then the rest, so the second chunk reads the first from the paged cache through
// the block tables (the prefix-hit / chunked-prefill path); only the second chunk's logits are
// returned (step 0). Prompts need at least 2 tokens then. The pool: num_blocks blocks of bs
// tokens.
inline std::vector<std::vector<std::vector<float>>> teacher_forced(
    const std::vector<Model*>& models, const std::vector<std::vector<int32_t>>& prompts,
    int steps, bool split_prefill = false, int64_t num_blocks = 64, int64_t bs = 16) {
  const int64_t vocab = models[0]->config().vocab_size;
  for (Model* m : models) m->allocate_kv_cache(num_blocks, bs);
  BlockManager bm(num_blocks, bs, /*enable_prefix_caching=*/false);
  BatchMetadataBuilder builder(bm);
  std::vector<Sequence> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.emplace_back(static_cast<SeqId>(i), prompts[i]);
    bm.allocate(seqs.back());
  }
  std::vector<std::vector<std::vector<float>>> out(models.size());
  for (int step = split_prefill ? -1 : 0; step <= steps; ++step) {
    std::vector<ScheduledSequence> batch;
    std::vector<int32_t> rows;
    int64_t row = 0;
    for (auto& s : seqs) {
      const int64_t left = s.num_uncomputed_tokens();
      const int64_t n = step < 0 ? std::max<int64_t>(1, left / 2) : left;
      batch.push_back({&s, n});
      row += n;
      rows.push_back(static_cast<int32_t>(row - 1));
    }
    const BatchMetadata& meta = builder.build(batch);
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    std::vector<float> first_chunk;  // the first chunk's logits: computed, not returned
    for (size_t m = 0; m < models.size(); ++m) {
      std::vector<float>& logits = step < 0 ? first_chunk : out[m].emplace_back();
      logits.assign(rows.size() * vocab, 0.0f);
      models[m]->forward(in, logits);
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      bm.mark_computed(seqs[i], batch[i].num_new_tokens);
      if (step < 0) continue;  // mid-prompt: no token appended
      seqs[i].append_token(argmax(&out[0].back()[i * vocab], vocab));
      bm.append(seqs[i]);
    }
  }
  for (auto& s : seqs) bm.free(s);
  return out;
}

// Largest |a[i] - b[i]|.
inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

struct Agreement {
  int agree = 0, total = 0;
  float worst_margin = 0.0f;  // the largest reference margin at which the argmax differed
  double max_logit_diff = 0.0;
};

// Compares two models' teacher-forced logits (logits[model] of teacher_forced) step by step and
// row by row: argmax agreement, the largest logit difference, and each disagreement printed
// with both margins under the label `what`; then a summary line.
inline Agreement compare(const std::vector<std::vector<float>>& ref,
                  const std::vector<std::vector<float>>& got, int64_t vocab, const char* what) {
  Agreement a;
  for (size_t step = 0; step < ref.size(); ++step) {
    a.max_logit_diff = std::max(a.max_logit_diff, max_diff(ref[step], got[step]));
    const auto rows = static_cast<int64_t>(ref[step].size()) / vocab;
    for (int64_t i = 0; i < rows; ++i) {
      const float* r = &ref[step][i * vocab];
      const float* g = &got[step][i * vocab];
      ++a.total;
      if (argmax(r, vocab) == argmax(g, vocab)) {
        ++a.agree;
      } else {
        a.worst_margin = std::max(a.worst_margin, margin(r, vocab));
        std::printf("  %s: differs at prompt %lld step %zu: reference margin %.4f, margin %.4f\n",
                    what, static_cast<long long>(i), step, margin(r, vocab),
                    margin(g, vocab));
      }
    }
  }
  std::printf("%s: %d/%d argmax agree (%.1f%%), max logit diff %.4f, largest reference margin at "
              "a disagreement %.4f\n", what, a.agree, a.total, 100.0 * a.agree / a.total,
              a.max_logit_diff, a.worst_margin);
  return a;
}

}  // namespace kvattn::test
