// The fused decode GEMVs in the CUDA model (ModelOptions::fused_gemv, KVATTN_FUSED_GEMV;
// cuda_model.cpp run_layers, cuda_gemv.h): steps of at most 8 rows run the input norm inside
// the qkv GEMV and the post-attention norm and SiLU * up inside the gate_up GEMV.
// - greedy tokens through the whole engine with the fused GEMVs on equal those with them off,
//   graphs on and off, at batch 1, 3, 17 and 100 (issue 20's batches; 17 and 100 decode above
//   8 rows, so only their short prefills, if any, take the fused path) on the tiny Qwen3 and
//   Llama checkpoints;
// - teacher-forced logits of a prefill and six decode steps, fused on vs off, bit-equal at
//   batch 1, 3 and 17 (graphs and eager), and the fused path really ran (CudaModelStats), the
//   qkv GEMV's q/k norm + RoPE + KV write epilogue included;
// - the option and KVATTN_FUSED_GEMV reach the model.
// Bit-equality needs the unfused reference to sum the projections in the fused kernels' order,
// i.e. through the GEMV (the fused kernels are the GEMV's main loop with a prologue and an
// epilogue; cuBLASLt, which the default Gemv::Mode keeps for qkv and gate_up, sums in another
// order). So this binary sets KVATTN_GEMV=all before anything reads it unless the caller set
// KVATTN_GEMV; run it with KVATTN_GEMV unset-by-you for the strict check. Exits 77 without a
// CUDA device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "kvattn/kernels/device_faults.h"
#include "teacher_forced.h"

#ifdef KVATTN_WITH_CUDA
#include "engine/model/cuda_gemv.h"
#include "engine/model/cuda_model.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

using Tokens = std::vector<std::vector<int32_t>>;

// Sets KVATTN_FUSED_GEMV for the scope (the model reads it at construction).
struct FusedEnv {
  explicit FusedEnv(bool on) { setenv("KVATTN_FUSED_GEMV", on ? "1" : "0", 1); }
  ~FusedEnv() { unsetenv("KVATTN_FUSED_GEMV"); }
};

// `batch` prompts of 3-62 random ids (the same for every mode), 24 greedy tokens each, all
// submitted at once: decode steps of up to `batch` sequences, on the graph ladder (<= 128).
Tokens greedy_tokens(const std::string& arch, int batch, bool fused, bool graphs) {
  FusedEnv env(fused);
  LLMOptions o = test::gpu_options();
  o.cuda_graphs = graphs;
  o.max_num_seqs = 128;
  LLM llm(load_hf_model(test::checkpoint("tiny_" + arch)), std::nullopt, o);
  std::mt19937_64 rng(4000 + batch);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < batch; ++b) prompts.push_back(test::random_tokens(rng, 3 + rng() % 60));
  const Tokens t = test::tokens_of(llm.generate(prompts, test::greedy(24)));
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0) << "KV blocks leaked";
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
  return t;
}

class FusedGemvGreedy : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FusedGemvGreedy, FusedEqualsUnfusedGraphsAndEager) {
  const auto& [arch, batch] = GetParam();
  const Tokens want = greedy_tokens(arch, batch, false, false);
  ASSERT_EQ(want.size(), static_cast<size_t>(batch));
  for (bool graphs : {false, true}) {
    EXPECT_EQ(greedy_tokens(arch, batch, true, graphs), want)
        << arch << " batch " << batch << ": fused GEMV (" << (graphs ? "graphs" : "eager")
        << ") differs from unfused (eager)";
  }
  EXPECT_EQ(greedy_tokens(arch, batch, false, true), want)
      << arch << " batch " << batch << ": unfused graphs differ from eager";
}

INSTANTIATE_TEST_SUITE_P(Tiny, FusedGemvGreedy,
                         ::testing::Combine(::testing::Values("qwen3", "llama"),
                                            ::testing::Values(1, 3, 17, 100)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_batch" +
                                  std::to_string(std::get<1>(info.param));
                         });

std::unique_ptr<Model> make_model(const std::string& arch, bool fused_gemv, bool graphs) {
  ModelOptions mo;
  mo.fused_gemv = fused_gemv;
  mo.cuda_graphs = graphs;
  mo.max_decode_batch = 32;
  return Model::create(load_hf_model(test::checkpoint("tiny_" + arch)), Device::cuda(0), mo);
}

class FusedGemvLogits : public ::testing::TestWithParam<std::string> {};

// One prefill of every prompt (2-7 ids: prefills of <= 8 rows at batch 1 take the fused path
// too), then six decode steps (padded rungs 1, 4 and 32), logits bit-equal.
TEST_P(FusedGemvLogits, TeacherForcedLogitsBitEqual) {
  const std::string arch = GetParam();
  auto off = make_model(arch, false, true);
  auto on_graphs = make_model(arch, true, true);
  auto on_eager = make_model(arch, true, false);
  ASSERT_FALSE(cuda_model_stats(*off).fused_gemv);
  ASSERT_TRUE(cuda_model_stats(*on_graphs).fused_gemv);
  for (int batch : {1, 3, 17}) {
    std::mt19937_64 rng(5000 + batch);
    std::vector<std::vector<int32_t>> prompts;
    std::uniform_int_distribution<int32_t> id(3, 250);
    for (int b = 0; b < batch; ++b) {
      prompts.emplace_back(2 + rng() % 6);
      for (auto& t : prompts.back()) t = id(rng);
    }
    const auto logits =
        test::teacher_forced({off.get(), on_graphs.get(), on_eager.get()}, prompts, 6);
    for (size_t m = 1; m < logits.size(); ++m) {
      ASSERT_EQ(logits[m].size(), logits[0].size());
      for (size_t step = 0; step < logits[0].size(); ++step) {
        EXPECT_EQ(test::max_diff(logits[0][step], logits[m][step]), 0.0)
            << arch << " batch " << batch << " step " << step << ": fused GEMV "
            << (m == 1 ? "(graphs)" : "(eager)") << " differs from unfused";
      }
    }
  }
  EXPECT_EQ(cuda_model_stats(*off).fused_gemv_steps, 0);
  EXPECT_GT(cuda_model_stats(*on_graphs).fused_gemv_steps, 0) << "the fused path never ran";
  EXPECT_GT(cuda_model_stats(*on_eager).fused_gemv_steps, 0) << "the fused path never ran";
  // The qkv GEMV's q/k norm + RoPE + KV write epilogue ran too where asked and it applies
  // (KVATTN_FUSED_ROPE=1, Gemv::run_rmsnorm_rope_kv; tiny checkpoints: heads of 64 = two tiles
  // of the split; KVATTN_FUSED_ROPE_PAIRS=1, run_rmsnorm_rope_pairs: llama, not qwen3's q/k
  // norms).
  EXPECT_EQ(cuda_model_stats(*off).fused_rope_layers, 0);
  for (const Model* m : {on_graphs.get(), on_eager.get()}) {
    if (cuda_model_stats(*m).fused_rope) {
      EXPECT_GT(cuda_model_stats(*m).fused_rope_layers, 0) << "the epilogue never ran";
    } else {
      EXPECT_EQ(cuda_model_stats(*m).fused_rope_layers, 0);
    }
  }
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

INSTANTIATE_TEST_SUITE_P(Tiny, FusedGemvLogits, ::testing::Values("qwen3", "llama"));

TEST(FusedGemv, TheOptionAndKVATTN_FUSED_GEMVReachTheModel) {
  auto on_of = [](bool option) {
    ModelOptions mo;
    mo.fused_gemv = option;
    auto m = Model::create(load_hf_model(test::checkpoint("tiny_qwen3")), Device::cuda(0), mo);
    return cuda_model_stats(*m).fused_gemv;
  };
  EXPECT_TRUE(ModelOptions{}.fused_gemv);  // on by default since session 12 (H200)
  EXPECT_FALSE(on_of(false));
  EXPECT_TRUE(on_of(true));
  setenv("KVATTN_FUSED_GEMV", "0", 1);
  EXPECT_FALSE(on_of(true));
  setenv("KVATTN_FUSED_GEMV", "1", 1);
  EXPECT_TRUE(on_of(false));
  unsetenv("KVATTN_FUSED_GEMV");
  EXPECT_FALSE(on_of(false));
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  // The unfused reference through the GEMV (file comment); read once per process.
  setenv("KVATTN_GEMV", "all", 0);
  // Bit-equality at batch 1 needs both sides on the layered path: the token kernel
  // (token_layers/token_runner.h) runs only where the fused GEMVs are on.
  setenv("KVATTN_TOKEN_KERNEL", "0", 1);  // whatever the caller set: the comparison needs it off
  return kvattn::test::gpu_test_main(argc, argv);
}
