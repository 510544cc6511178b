// fp8 KV-cache calibration on the GPU (Model::track_kv_amax on the CUDA model):
//  - kv_amax_record, the kernel: per-head max |k| and |v| of strided bf16 rows, folded into
//    running maxima, equal to the CPU's max over the same bf16 values (exact: no arithmetic
//    but |x| and max), NaN ignored and Inf recorded as cpu_model::KvScales::record does;
//  - the CUDA model against the CPU model on the tiny Qwen3 checkpoint, both tracking over the
//    same teacher-forced prompts: the same maxima up to the bf16 rounding of the GPU's
//    activations (the CPU model computes K and V in float32);
//  - the LLM front end on CUDA with a calibration prompt: generate runs, the pool is idle after.
// Exits 77 without a CUDA device (or in a build without the CUDA backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "teacher_forced.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_kv_amax.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

#define T_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Rows of ld bf16 elements: K of `heads` heads of d at column k0, V at column v0.
TEST(KvAmaxRecord, MatchesTheHostMaxAndFoldsAcrossCalls) {
  const int64_t heads = 3, d = 80, k0 = 7 * 8, v0 = k0 + heads * d, ld = v0 + heads * d + 24;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  float* amax = nullptr;
  T_CUDA(cudaMalloc(reinterpret_cast<void**>(&amax), 2 * heads * sizeof(float)));
  T_CUDA(cudaMemset(amax, 0, 2 * heads * sizeof(float)));
  std::vector<float> want(2 * heads, 0.0f);
  for (const int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{200}}) {
    std::vector<uint16_t> rows(static_cast<size_t>(tokens * ld));
    for (auto& r : rows) r = float_to_bf16(u(rng)).bits;
    // A NaN in K head 0 (ignored) and -Inf in V head 2 of the last row (recorded as +Inf) on
    // the 200-token call; a large value in K head 1 of the 5-token call.
    if (tokens == 200) {
      rows[static_cast<size_t>((tokens - 1) * ld + k0 + 3)] = 0x7fc1;
      rows[static_cast<size_t>((tokens - 1) * ld + v0 + 2 * d + 5)] = 0xff80;
    }
    if (tokens == 5) rows[static_cast<size_t>(2 * ld + k0 + d + 1)] = float_to_bf16(-37.5f).bits;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t x = 0; x < d; ++x) {
          const float kv = bf16_to_float(bf16_t{rows[t * ld + k0 + h * d + x]});
          const float vv = bf16_to_float(bf16_t{rows[t * ld + v0 + h * d + x]});
          want[h] = std::fmax(want[h], std::fabs(kv));
          want[heads + h] = std::fmax(want[heads + h], std::fabs(vv));
        }
      }
    }
    uint16_t* dev = nullptr;
    T_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev), rows.size() * 2));
    T_CUDA(cudaMemcpy(dev, rows.data(), rows.size() * 2, cudaMemcpyHostToDevice));
    cuda_model::kv_amax_record(dev + k0, dev + v0, ld, tokens, heads, d, amax, amax + heads,
                               nullptr);
    T_CUDA(cudaDeviceSynchronize());
    cudaFree(dev);
    std::vector<float> got(2 * heads);
    T_CUDA(cudaMemcpy(got.data(), amax, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << "tokens " << tokens << ", " << (i < heads ? "k" : "v")
                                 << " head " << i % heads;
    }
  }
  EXPECT_EQ(want[1], 37.5f);  // the planted values took part
  EXPECT_TRUE(std::isinf(want[heads + 2]));
  cudaFree(amax);
}

std::unique_ptr<Model> fp8_model(Device d) {
  ModelOptions o;
  o.kv_cache_dtype = KVCacheDType::kFP8;
  return Model::create(load_hf_model(test::checkpoint("tiny_qwen3")), d, o);
}

TEST(KvCalibrationGpu, CudaMaximaMatchTheCpuModels) {
  auto cpu = fp8_model(Device::cpu());
  auto gpu = fp8_model(Device::cuda(0));
  ASSERT_EQ(gpu->kv_dtype(), DType::kF8E4M3);
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(test::random_tokens(rng, 9 + 31 * i));
  cpu->track_kv_amax(true);
  gpu->track_kv_amax(true);
  test::teacher_forced({cpu.get(), gpu.get()}, prompts, 4);
  cpu->track_kv_amax(false);
  gpu->track_kv_amax(false);
  const ModelConfig& c = cpu->config();
  const size_t n = static_cast<size_t>(c.num_layers * c.num_kv_heads);
  std::vector<float> ck(n), cv(n), gk(n), gv(n);
  cpu->kv_amax(ck, cv);
  gpu->kv_amax(gk, gv);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_GT(ck[i], 0.0f);
    // bf16 activations against float32 ones: a few bf16 ulps after two layers.
    EXPECT_NEAR(gk[i], ck[i], 0.05 * ck[i] + 1e-3) << "k, layer " << i / c.num_kv_heads
                                                   << " head " << i % c.num_kv_heads;
    EXPECT_NEAR(gv[i], cv[i], 0.05 * cv[i] + 1e-3) << "v, layer " << i / c.num_kv_heads
                                                   << " head " << i % c.num_kv_heads;
  }
  std::printf("[kv calibration] layer 0 k amax cpu %.4f gpu %.4f, v amax cpu %.4f gpu %.4f\n",
              ck[0], gk[0], cv[0], gv[0]);
  // Tracking off: further steps record nothing (the maxima stay), and graphs come back.
  test::teacher_forced({gpu.get()}, prompts, 2);
  std::vector<float> gk2(n), gv2(n);
  gpu->kv_amax(gk2, gv2);
  EXPECT_EQ(gk2, gk);
  EXPECT_EQ(gv2, gv);
}

TEST(KvCalibrationGpu, TheEngineCalibratesOnCuda) {
  LLMOptions o = test::gpu_options();
  o.kv_cache_dtype = KVCacheDType::kFP8;
  std::mt19937_64 rng(8);
  o.kv_calibration_tokens = test::random_tokens(rng, 40);
  LLM llm(load_hf_model(test::checkpoint("tiny_qwen3")), std::nullopt, o);
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  const auto outs = llm.generate({test::random_tokens(rng, 12), test::random_tokens(rng, 30)}, sp);
  ASSERT_EQ(outs.size(), 2u);
  for (const auto& out : outs) EXPECT_EQ(out.token_ids.size(), 8u);
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0);
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
