// The CUDA model's weights are the same bytes whichever way the checkpoint was loaded: float32
// (the loader widens BF16/F16, the upload rounds back to bf16: exact) or kept in the file's
// dtype (HfLoadOptions::keep_16bit: BF16 copied as it is, F16 through float32). Checked bit for
// bit on the logits of every tiny family rewritten in BF16/F16 (teacher-forced, split prefill
// and decode steps) and through the LLM (KVATTN_LOAD_F32=1 vs the default bf16 load). Large
// checkpoints (timing, and the same bit check past one staging chunk):
// bench/gpu_load_time_bench.cu.
// Exits 77 without a CUDA device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint_16bit.h"
#include "engine_test_util.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "teacher_forced.h"
#include "temp_dir.h"

namespace kvattn {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 4; ++i) {
    auto t = test::random_tokens(rng, 3 + 29 * i);
    for (auto& x : t) x %= static_cast<int32_t>(vocab);
    p.push_back(t);
  }
  return p;
}

// The CUDA model from the float32 load and from the kept one: logits equal bit for bit.
void expect_bit_identical(const std::string& dir, const std::string& what, int steps) {
  HfLoadOptions keep;
  keep.keep_16bit = true;
  ModelWeights kept = load_hf_model(dir, {}, keep);
  int kept16 = 0;
  for (const auto& [n, t] : kept.tensors) kept16 += t.dtype() != DType::kF32;
  EXPECT_GT(kept16, 0) << what << ": no tensor kept in 16 bits";
  const int64_t vocab = kept.config.vocab_size;
  auto b = Model::create(std::move(kept), Device::cuda(0), ModelOptions{});
  auto a = Model::create(load_hf_model(dir), Device::cuda(0), ModelOptions{});
  const auto logits = test::teacher_forced({a.get(), b.get()}, prompts(vocab), steps,
                                           /*split_prefill=*/true);
  size_t differ = 0, total = 0;
  for (size_t s = 0; s < logits[0].size(); ++s) {
    ASSERT_EQ(logits[0][s].size(), logits[1][s].size());
    total += logits[0][s].size();
    for (size_t i = 0; i < logits[0][s].size(); ++i) {
      differ += std::memcmp(&logits[0][s][i], &logits[1][s][i], sizeof(float)) != 0;
    }
  }
  std::printf("[%s] float32 load vs bf16 load: %zu of %zu logits differ\n", what.c_str(), differ,
              total);
  EXPECT_EQ(differ, 0u) << what;
}

TEST(Load16BitGpu, TinyFamiliesLogitsAreBitIdentical) {
  for (const char* name :
       {"llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"}) {
    TempDir dir;
    test::write_16bit_copy(test::checkpoint(std::string("tiny_") + name), dir.path());
    expect_bit_identical(dir.path().string(), name, 8);
  }
}

TEST(Load16BitGpu, LlmLoadSwitchGivesTheSameTokens) {
  TempDir dir;
  test::write_16bit_copy(test::checkpoint("tiny_qwen3"), dir.path());
  LLMOptions o = test::gpu_options();
  o.model = dir.path().string();
  auto run = [&](bool f32) {
    if (f32) ::setenv("KVATTN_LOAD_F32", "1", 1);
    else ::unsetenv("KVATTN_LOAD_F32");
    LLM llm(o);
    ::unsetenv("KVATTN_LOAD_F32");
    return test::tokens_of(llm.generate(prompts(llm.config().vocab_size), test::greedy(16)));
  };
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
