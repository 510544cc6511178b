// HF-parity helpers shared by the engine tests: the cases a tiny checkpoint's expected*.json
// holds (made by scripts/make_tiny_checkpoints.py: prompts, HF's greedy continuation and HF's
// float32 logits at each step) and a teacher-forced run of a Model through the paged cache,
// the BlockManager and the batch metadata builder, as the engine does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"

namespace kvattn::test {

struct Case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;             // HF's greedy continuation
  std::vector<std::vector<float>> logits;  // HF's logits at each step of it
};

inline std::string tiny_dir(const std::string& arch) {
  return std::string(KVATTN_SOURCE_DIR) + "/tests/data/tiny_" + arch;
}

// tiny_llama with random q/k/v and o_proj biases (Llama's attention_bias; no tiny checkpoint
// has an o_proj bias), the same weights every call.
inline ModelWeights llama_with_biases() {
  ModelWeights w = load_hf_model(tiny_dir("llama"));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  const ModelConfig& c = w.config;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    for (auto [name, n] : {std::pair{"q_proj.bias", c.num_heads * c.head_dim},
                           {"k_proj.bias", c.num_kv_heads * c.head_dim},
                           {"v_proj.bias", c.num_kv_heads * c.head_dim},
                           {"o_proj.bias", c.hidden_size}}) {
      Tensor t = Tensor::empty({n}, DType::kF32);
      for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = nd(rng);
      w.tensors[p + name] = t;
    }
  }
  w.config.qkv_bias = w.config.o_bias = true;
  return w;
}

// tests/data/tiny_<arch>/<file>.
inline std::vector<Case> load_cases(const std::string& arch,
                                    const std::string& file = "expected.json") {
  const std::string path = tiny_dir(arch) + "/" + file;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path;
  const auto j = nlohmann::json::parse(f);
  std::vector<Case> cases;
  for (const auto& c : j.at("cases")) {
    cases.push_back({c.at("prompt").get<std::vector<int32_t>>(),
                     c.at("greedy").get<std::vector<int32_t>>(),
                     c.at("logits").get<std::vector<std::vector<float>>>()});
  }
  return cases;
}

// max |out - ref| / max |ref| over one row of logits.
inline double max_rel_error(const float* out, const std::vector<float>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    err = std::max(err, std::abs(static_cast<double>(out[i]) - ref[i]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  }
  return err / scale;
}

// All cases batched: prompts in steps of at most `chunk` tokens each, then decode steps fed
// with HF's greedy tokens (teacher forcing, so a near-tie cannot desynchronise the
// comparison). Calls on_logits(case, step, logits row) for every row the model samples.
template <typename OnLogits>
void teacher_forced_steps(Model& model, const std::vector<Case>& cases, int64_t block_size,
                          int64_t chunk, OnLogits&& on_logits) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t num_blocks = 64 * 1024 / block_size;
  model.allocate_kv_cache(num_blocks, block_size);
  BlockManager bm(num_blocks, block_size, /*enable_prefix_caching=*/false);
  BatchMetadataBuilder builder(bm);
  std::vector<Sequence> seqs;
  for (size_t i = 0; i < cases.size(); ++i) {
    seqs.emplace_back(static_cast<SeqId>(i), cases[i].prompt);
    bm.allocate(seqs.back());
  }
  std::vector<size_t> step(cases.size(), 0);
  for (;;) {
    std::vector<ScheduledSequence> batch;
    std::vector<size_t> who;
    std::vector<int32_t> rows, sampled;
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step[i] >= cases[i].greedy.size()) continue;
      const int64_t n = std::min(seqs[i].num_uncomputed_tokens(), chunk);
      batch.push_back({&seqs[i], n});
      who.push_back(i);
      if (seqs[i].num_computed_tokens() + n == seqs[i].num_tokens()) {
        rows.push_back(static_cast<int32_t>(row + n - 1));
        sampled.push_back(static_cast<int32_t>(i));
      }
      row += n;
    }
    if (batch.empty()) break;
    const BatchMetadata& meta = builder.build(batch);
    std::vector<float> logits(rows.size() * vocab, NAN);
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    model.forward(in, logits);
    for (size_t b = 0; b < batch.size(); ++b) bm.mark_computed(seqs[who[b]], batch[b].num_new_tokens);
    for (size_t r = 0; r < sampled.size(); ++r) {
      const size_t i = sampled[r];
      on_logits(i, step[i], &logits[r * vocab]);
      seqs[i].append_token(cases[i].greedy[step[i]]);
      ++step[i];
      bm.append(seqs[i]);
    }
  }
  for (auto& s : seqs) bm.free(s);
}

// The worst relative logit error over every step of teacher_forced_steps (each below
// `tolerance`).
inline double teacher_forced_error(Model& model, const std::vector<Case>& cases, int64_t block_size,
                                   int64_t chunk, double tolerance = 1e-4) {
  double worst = 0;
  teacher_forced_steps(model, cases, block_size, chunk,
                       [&](size_t i, size_t step, const float* logits) {
                         const double e = max_rel_error(logits, cases[i].logits[step]);
                         EXPECT_LT(e, tolerance) << "case " << i << " (prompt "
                                                 << cases[i].prompt.size() << " tokens) step "
                                                 << step;
                         worst = std::max(worst, e);
                       });
  return worst;
}

}  // namespace kvattn::test
