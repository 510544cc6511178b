// The CUDA model's weights are the same bytes whichever way the checkpoint was loaded: float32
// (the loader widens BF16/F16, the upload rounds back to bf16: exact) or kept in the file's
// dtype (HfLoadOptions::keep_16bit: BF16 copied as it is, F16 through float32). Checked bit for
// bit on the logits of every tiny family rewritten in BF16/F16 (teacher-forced, split prefill
// and decode steps), through the LLM (KVATTN_LOAD_F32=1 vs the default bf16 load), and on
// KVATTN_LOAD_16BIT_CHECKPOINT (a bf16 directory, e.g. the random Qwen3 of
// scripts/gpu_load_time.sh) when set; LoadTime times both loads (scripts/gpu_load_time.sh).
// Exits 77 without a CUDA device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

namespace kvattn {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kvattn_16bit_gpu_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

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
  for (const char* name : {"llama", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"}) {
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

TEST(Load16BitGpu, ExtraCheckpointFromTheEnvironment) {
  const char* dir = std::getenv("KVATTN_LOAD_16BIT_CHECKPOINT");
  if (dir == nullptr || dir[0] == '\0') GTEST_SKIP() << "KVATTN_LOAD_16BIT_CHECKPOINT not set";
  expect_bit_identical(dir, dir, 4);
}

// scripts/gpu_load_time.sh: KVATTN_LOAD_TIME_CHECKPOINT (an HF directory, its files in the
// page cache) loaded onto cuda:0 the old way (float32 host tensors, then bf16) and the new way
// (bf16 kept from the file), alternately, KVATTN_LOAD_TIME_ROUNDS times (default 2): seconds
// to read the host tensors, to upload them (Model::create, which ends synchronized), in all,
// and the file's tensor bytes per second.
TEST(Load16BitGpu, LoadTime) {
  const char* dir = std::getenv("KVATTN_LOAD_TIME_CHECKPOINT");
  if (dir == nullptr || dir[0] == '\0') GTEST_SKIP() << "KVATTN_LOAD_TIME_CHECKPOINT not set";
  const char* r = std::getenv("KVATTN_LOAD_TIME_ROUNDS");
  const int rounds = r != nullptr ? std::max(1, std::atoi(r)) : 2;
  double file_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") file_bytes += static_cast<double>(e.file_size());
  }
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  for (int round = 1; round <= rounds; ++round) {
    for (bool keep : {false, true}) {
      HfLoadOptions o;
      o.keep_16bit = keep;
      const auto t0 = Clock::now();
      ModelWeights w = load_hf_model(dir, {}, o);
      const auto t1 = Clock::now();
      auto m = Model::create(std::move(w), Device::cuda(0), ModelOptions{});
      const auto t2 = Clock::now();
      m.reset();
      const double total = secs(t0, t2);
      std::printf("load time: %-28s round %d: host tensors %6.2f s, upload %6.2f s, total %6.2f s, "
                  "%5.2f GB/s (%.2f GB of safetensors)\n",
                  keep ? "bf16 kept (new)" : "float32 round trip (old)", round, secs(t0, t1),
                  secs(t1, t2), total, file_bytes / 1e9 / total, file_bytes / 1e9);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
