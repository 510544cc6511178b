// The default model (SmolLM2-135M-Instruct, Q4_1 GGUF with a Q8_0 embedding) computed on its
// own blocks (WeightFormat::kGguf, qdot's int8 dot products) against the same file
// dequantized to float32 and against the former int8 re-quantization (kQ8): teacher-forced
// greedy decoding (3 chat prompts one at a time, a prefill then 16 decode steps, every model fed the
// float32 model's argmax so one near-tie cannot desynchronise the rest). Every step where a
// model's argmax differs from float32's prints float32's top-2 margin there; the test
// requires agreement except at near-ties (margin below 1.0 logit), and "Paris". Exits 77
// (skipped) without the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/engine/gguf.h"
#include "kvattn/engine/model.h"
#include "teacher_forced.h"
#include "kvattn/engine/tokenizer.h"
#include "kvattn/engine/weights.h"

namespace kvattn {
namespace {

const std::string kModel =
    std::string(KVATTN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int kSteps = 16;

std::unique_ptr<Model> make_model(WeightFormat f) {
  ModelOptions o;
  o.weight_format = f;
  GgufLoadOptions load;
  load.keep_quantized = f == WeightFormat::kGguf;
  return Model::create(load_gguf_model(kModel, {}, load), Device::cpu(), o);
}

using test::argmax;
using test::margin;

// The last prompt token's logits computed in one prefill step of the whole prompt and in a
// decode-sized step after the rest (what a prefix-cache hit does): every weight format
// computes a token differently in steps of different sizes (sgemm panels vs streaming
// kernels), so these differ by float32 rounding; printed per format.
std::vector<float> last_logits(Model& m, const std::vector<int32_t>& p, bool split) {
  const int64_t vocab = m.config().vocab_size, bs = 16, num_blocks = 64;
  m.allocate_kv_cache(num_blocks, bs);
  BlockManager bm(num_blocks, bs, /*enable_prefix_caching=*/false);
  BatchMetadataBuilder builder(bm);
  std::vector<Sequence> seqs;
  seqs.emplace_back(SeqId{0}, split ? std::vector<int32_t>(p.begin(), p.end() - 1) : p);
  Sequence& s = seqs.back();
  bm.allocate(s);
  std::vector<float> out(vocab);
  auto step = [&](int64_t n) {
    std::vector<ScheduledSequence> batch{{&s, n}};
    const BatchMetadata& meta = builder.build(batch);
    ModelInput in;
    in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
    const std::vector<int32_t> rows{static_cast<int32_t>(meta.num_tokens - 1)};
    in.logit_rows = rows;
    in.ctx = &meta.ctx;
    m.forward(in, out);
    bm.mark_computed(s, n);
  };
  step(s.num_uncomputed_tokens());
  if (split) {
    s.append_token(p.back());
    bm.append(s);
    step(1);
  }
  bm.free(s);
  return out;
}

TEST(DefaultModelQuant, StepSizeChangesLogitsByRoundingOnly) {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(kModel));
  const std::vector<int32_t> p = tok.encode(
      tok.apply_chat_template({ChatMessage{"user", "Tell me a fun fact."}}, true), true);
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kQ8, WeightFormat::kGguf}) {
    auto m = make_model(f);
    const auto a = last_logits(*m, p, false), b = last_logits(*m, p, true);
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double{std::fabs(a[i] - b[i])});
    std::printf("[default model] %s: last prompt token, whole-prompt step vs decode-sized step: "
                "max |logit diff| %.3g\n", std::string(weight_format_name(f)).c_str(), d);
    EXPECT_LT(d, 0.05) << weight_format_name(f);
  }
}

TEST(DefaultModelQuant, GreedyTokensAgreeWithFloat32ExceptNearTies) {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(kModel));
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"What is the capital of France?", "Write a haiku about the sea.",
                        "Tell me a short story about a robot who learns to paint."}) {
    std::vector<int32_t> ids = tok.encode(
        tok.apply_chat_template({ChatMessage{"user", p}}, /*add_generation_prompt=*/true),
        /*parse_special=*/true);
    prompts.push_back(ids);
  }
  auto f32 = make_model(WeightFormat::kF32);
  auto gguf = make_model(WeightFormat::kGguf);
  auto q8 = make_model(WeightFormat::kQ8);
  // One prompt at a time: decode steps of one row run qdot's kernels (steps of more than
  // kStreamingMaxRows rows dequantize panels for sgemm, as prefill does).
  std::vector<std::vector<std::vector<float>>> logits(3);
  for (const auto& p : prompts) {
    const auto one = test::teacher_forced({f32.get(), gguf.get(), q8.get()}, {p}, kSteps);
    for (int m = 0; m < 3; ++m) logits[m].insert(logits[m].end(), one[m].begin(), one[m].end());
  }
  const int64_t vocab = f32->config().vocab_size;
  const char* names[] = {"f32", "gguf", "q8"};
  std::string first;
  for (int step = 0; step <= kSteps; ++step) first += tok.decode({argmax(logits[0][step].data(), vocab)});
  std::printf("[default model] f32 answer: %s\n", first.c_str());
  EXPECT_NE(first.find("Paris"), std::string::npos) << first;
  for (int m = 1; m < 3; ++m) {
    int agree = 0, total = 0;
    double max_diff = 0;
    float worst = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (int step = 0; step <= kSteps; ++step) {
        const float* ref = logits[0][i * (kSteps + 1) + step].data();
        const float* got = logits[m][i * (kSteps + 1) + step].data();
        for (int64_t v = 0; v < vocab; ++v) max_diff = std::max<double>(max_diff, std::fabs(got[v] - ref[v]));
        ++total;
        if (argmax(ref, vocab) == argmax(got, vocab)) {
          ++agree;
          continue;
        }
        worst = std::max(worst, margin(ref, vocab));
        std::printf("[default model] %s differs from f32 at prompt %zu step %d: f32 margin %.4f\n",
                    names[m], i, step, margin(ref, vocab));
      }
    }
    std::printf("[default model] %s: %d/%d steps agree with f32 (%.1f%%), max |logit diff| "
                "%.3f, largest f32 margin at a disagreement %.4f\n",
                names[m], agree, total, 100.0 * agree / total, max_diff, worst);
    EXPECT_LT(worst, 1.0f) << names[m] << " differs from f32 where f32 is not near a tie";
  }
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!std::filesystem::exists(kvattn::kModel)) {
    std::printf("default model %s absent (run scripts/fetch_model.sh): skipping\n",
                kvattn::kModel.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
