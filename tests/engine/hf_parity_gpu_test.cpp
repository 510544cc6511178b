// HF parity on the GPU machine (issue 5 acceptance): a random bf16 model of the Qwen3-0.6B
// shape made by scripts/hf_parity.py, 8 prompts, 32 greedy tokens each.
//   python3 scripts/hf_parity.py --out /tmp/parity
//   KVATTN_HF_PARITY_DIR=/tmp/parity ./build/tests/engine/engine_hf_parity_gpu_test
// Reports per prompt how many tokens match HF, HF's logit margin at the first divergence (a
// bf16 near-tie explains a divergence), the relative logit error under teacher forcing, and
// single-stream decode tok/s. Exits 77 without KVATTN_HF_PARITY_DIR or, for the default
// device cuda, without a CUDA device. KVATTN_HF_PARITY_DEVICE=cpu runs it on the CPU (float32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/safetensors.h"

namespace kvattn {
namespace {

std::string dir() { return std::getenv("KVATTN_HF_PARITY_DIR"); }
Device device() {
  const char* d = std::getenv("KVATTN_HF_PARITY_DEVICE");
  return d != nullptr && std::string(d) == "cpu" ? Device::cpu() : Device::cuda(0);
}

struct Oracle {
  std::vector<std::vector<int32_t>> prompts, greedy;
  Tensor logits;  // float32 [cases, steps, vocab]
};

Oracle load_oracle() {
  Oracle o;
  std::ifstream f(dir() + "/expected.json");
  const auto j = nlohmann::json::parse(f);
  for (const auto& c : j.at("cases")) {
    o.prompts.push_back(c.at("prompt").get<std::vector<int32_t>>());
    o.greedy.push_back(c.at("greedy").get<std::vector<int32_t>>());
  }
  SafetensorsFile lf = SafetensorsFile::open(dir() + "/logits.safetensors");
  o.logits = lf.to_f32(*lf.find("logits"));
  return o;
}

const float* hf_logits(const Oracle& o, size_t c, size_t step) {
  const int64_t steps = o.logits.size(1), vocab = o.logits.size(2);
  return o.logits.ptr<float>() + (static_cast<int64_t>(c) * steps + step) * vocab;
}

TEST(HFParity, GreedyTokensLogitsAndDecodeSpeed) {
  const Oracle o = load_oracle();
  const int64_t vocab = o.logits.size(2);
  const int steps = static_cast<int>(o.logits.size(1));
  LLMOptions opt;
  opt.device = device();
  opt.kv_cache_bytes = int64_t{2} << 30;
  LLM llm(load_hf_model(dir()), std::nullopt, opt);

  // Teacher forcing through the engine's own Model, paged cache and metadata builder.
  const ModelConfig cfg = llm.config();
  auto model = Model::create(load_hf_model(dir()), device());
  const int64_t bs = 16, num_blocks = 4096;
  model->allocate_kv_cache(num_blocks, bs);
  BlockManager bm(num_blocks, bs, false);
  BatchMetadataBuilder builder(bm);
  double worst = 0, sum_rel_l2 = 0;
  // max |kvattn - HF| over the vocabulary, per prompt and step.
  std::vector<std::vector<double>> max_abs(o.prompts.size(), std::vector<double>(steps));
  int64_t rows = 0;
  for (size_t c = 0; c < o.prompts.size(); ++c) {
    Sequence seq(static_cast<SeqId>(c), o.prompts[c]);
    bm.allocate(seq);
    std::vector<float> lg(vocab);
    for (int s = 0; s < steps; ++s) {
      const int64_t n = seq.num_uncomputed_tokens();
      ScheduledSequence sched{&seq, n};
      const BatchMetadata& meta = builder.build({&sched, 1});
      const int32_t row = static_cast<int32_t>(n - 1);
      ModelInput in;
      in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(n)};
      in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(n)};
      in.logit_rows = {&row, 1};
      in.ctx = &meta.ctx;
      model->forward(in, lg);
      bm.mark_computed(seq, n);
      const float* ref = hf_logits(o, c, s);
      double err = 0, scale = 0, d2 = 0, r2 = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double d = static_cast<double>(lg[v]) - ref[v];
        err = std::max(err, std::abs(d));
        scale = std::max(scale, std::abs(static_cast<double>(ref[v])));
        d2 += d * d;
        r2 += static_cast<double>(ref[v]) * ref[v];
      }
      ASSERT_FALSE(std::isnan(err)) << "NaN logits, prompt " << c << " step " << s;
      worst = std::max(worst, err / scale);
      max_abs[c][s] = err;
      sum_rel_l2 += std::sqrt(d2 / r2);
      ++rows;
      seq.append_token(o.greedy[c][s]);
      bm.append(seq);
    }
    bm.free(seq);
  }
  std::printf("logits vs HF (%s, %lld steps): max |diff| / max |ref| %.3e, mean relative L2 %.3e\n",
              cfg.architecture.c_str(), static_cast<long long>(rows), worst, sum_rel_l2 / rows);
  // bf16 through 28 layers with other kernels and summation orders than HF's: measured
  // 2.35e-2 on the H200. The bound catches broken math, not rounding.
  EXPECT_LT(sum_rel_l2 / rows, 5e-2);

  SamplingParams sp;
  sp.max_tokens = steps;
  sp.ignore_eos = true;
  const auto outs = llm.generate(o.prompts, sp);
  int exact = 0;
  for (size_t c = 0; c < o.prompts.size(); ++c) {
    const auto& got = outs[c].token_ids;
    size_t same = 0;
    while (same < got.size() && same < o.greedy[c].size() && got[same] == o.greedy[c][same]) ++same;
    if (same == o.greedy[c].size()) {
      ++exact;
      std::printf("prompt %zu (%zu tokens): all %zu tokens equal HF\n", c, o.prompts[c].size(),
                  same);
      continue;
    }
    // HF's view of the step where kvattn chose differently: how far apart were the two? The
    // prefixes are equal up to here, so this step's logits are the teacher-forced ones: a
    // near-tie means a margin within the two logits' errors (<= 2 max |diff| at the step).
    const float* l = hf_logits(o, c, same);
    const double margin = l[o.greedy[c][same]] - l[got[same]];
    std::printf("prompt %zu (%zu tokens): first %zu tokens equal HF; at step %zu HF took %d, "
                "kvattn %d, HF logit margin %.4f (max |logit diff| at the step %.4f)\n",
                c, o.prompts[c].size(), same, same, o.greedy[c][same], got[same], margin,
                max_abs[c][same]);
    EXPECT_LE(margin, 2 * max_abs[c][same] + 1e-6)
        << "prompt " << c << " diverged by more than the logit error explains";
  }
  std::printf("%d of %zu prompts match HF for all %d tokens\n", exact, o.prompts.size(), steps);

  // Single-stream decode speed (reported, not asserted).
  SamplingParams one = sp;
  one.max_tokens = 128;
  llm.generate({o.prompts[0]}, one);
  llm.generate({o.prompts[0]}, one);
  const GenerationStats& st = llm.last_stats();
  std::printf("single-stream decode: %.1f tok/s (%lld tokens in %.3f s); prefill %.1f tok/s\n",
              st.decode_tokens_per_second(), static_cast<long long>(st.num_decode_tokens),
              st.decode_seconds, st.prefill_tokens_per_second());
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  const char* d = std::getenv("KVATTN_HF_PARITY_DIR");
  if (d == nullptr || *d == '\0') {
    std::printf("KVATTN_HF_PARITY_DIR not set (see scripts/hf_parity.py): skipping\n");
    return 77;
  }
  if (kvattn::device().is_cuda() && !kvattn::cuda_available()) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
