// Programmatic dependent launch (ModelOptions::pdl, KVATTN_PDL; src/engine/model/cuda_launch.h)
// against plain launches, through the CUDA model: every PDL kernel waits for its predecessor's
// completion before it touches memory, so the arithmetic and the bytes are the same and
// nothing less than equality is accepted:
// - greedy tokens through the whole engine with PDL on equal those with PDL off, graphs on and
//   off, at batch 1, 3, 17 and 100 (issue 20's batches), tiny llama and qwen3 (the GEMV runs
//   at batch <= 8, cuBLASLt above);
// - teacher-forced logits of a prefill and six decode steps bit-equal, PDL on (graphs and
//   eager) vs off, fused and unfused kernels, on the tiny llama, qwen2 (biases), qwen3 (q/k
//   norms), gemma (Gemma 1: the Gemma kernels without sandwich norms), gemma2 and gemma3 (the
//   Gemma kernels, soft-caps) checkpoints;
// - the kernels alone: 24 rounds of norm -> GEMV -> SiLU -> GEMV at Qwen3-0.6B's widths,
//   rows 1, 3 and 8, graph and eager, PDL vs plain bit-equal;
// - the option and KVATTN_PDL reach the model (CudaModelStats::pdl).
// The equality tests skip where the device cannot take PDL launches (before sm_90, or a CUDA
// older than 12.3): there both settings launch plainly. Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
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
#include <cuda_runtime_api.h>

#include "engine/model/cuda_gemm.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_launch.h"
#include "engine/model/cuda_model.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

using Tokens = std::vector<std::vector<int32_t>>;

#define SKIP_WITHOUT_PDL()                                                                \
  if (!cuda_model::pdl_supported(0)) {                                                    \
    GTEST_SKIP() << "this device or CUDA cannot take PDL launches: both settings launch " \
                    "plainly";                                                            \
  }

struct Mode {
  bool pdl, graphs;
};

std::string name(Mode m) {
  return std::string(m.pdl ? "PDL" : "plain") + (m.graphs ? ", graphs" : ", eager");
}

// `batch` prompts of 3-62 random ids (the same for every mode), 24 greedy tokens each, all
// submitted at once: decode steps of up to `batch` sequences, on the graph ladder (<= 128).
Tokens greedy_tokens(const std::string& arch, int batch, Mode m) {
  LLMOptions o = test::gpu_options();
  o.pdl = m.pdl;
  o.cuda_graphs = m.graphs;
  o.max_num_seqs = 128;
  LLM llm(load_hf_model(test::checkpoint("tiny_" + arch)), std::nullopt, o);
  std::mt19937_64 rng(2000 + batch);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < batch; ++b) prompts.push_back(test::random_tokens(rng, 3 + rng() % 60));
  const Tokens t = test::tokens_of(llm.generate(prompts, test::greedy(24)));
  EXPECT_EQ(llm.cache_stats().num_used_blocks, 0) << "KV blocks leaked";
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
  return t;
}

class PdlGreedy : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PdlGreedy, PdlEqualsPlainLaunchesGraphsAndEager) {
  SKIP_WITHOUT_PDL();
  const auto& [arch, batch] = GetParam();
  const Mode ref{false, false};
  const Tokens want = greedy_tokens(arch, batch, ref);
  ASSERT_EQ(want.size(), static_cast<size_t>(batch));
  for (Mode m : {Mode{true, false}, Mode{false, true}, Mode{true, true}}) {
    EXPECT_EQ(greedy_tokens(arch, batch, m), want)
        << arch << " batch " << batch << ": " << name(m) << " differs from " << name(ref);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, PdlGreedy,
                         ::testing::Combine(::testing::Values("llama", "qwen3"),
                                            ::testing::Values(1, 3, 17, 100)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_batch" +
                                  std::to_string(std::get<1>(info.param));
                         });

std::unique_ptr<Model> make_model(const std::string& arch, bool pdl, bool graphs, bool fused) {
  ModelOptions mo;
  mo.pdl = pdl;
  mo.cuda_graphs = graphs;
  mo.fused_kernels = fused;
  mo.max_decode_batch = 32;
  return Model::create(load_hf_model(test::checkpoint("tiny_" + arch)), Device::cuda(0), mo);
}

class PdlLogits : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

// One prefill of every prompt (2-21 ids), then six decode steps (the fixed path: graphs
// replayed, or the same padded step eagerly), the same inputs for every model (teacher_forced's
// 64 blocks of 16 hold batch 17): logits bit-equal.
TEST_P(PdlLogits, TeacherForcedLogitsBitEqual) {
  SKIP_WITHOUT_PDL();
  const auto& [arch, fused] = GetParam();
  auto plain = make_model(arch, false, true, fused);
  auto pdl_graphs = make_model(arch, true, true, fused);
  auto pdl_eager = make_model(arch, true, false, fused);
  ASSERT_FALSE(cuda_model_stats(*plain).pdl);
  ASSERT_TRUE(cuda_model_stats(*pdl_graphs).pdl);
  for (int batch : {1, 3, 17}) {
    std::mt19937_64 rng(3000 + batch);
    std::vector<std::vector<int32_t>> prompts;
    std::uniform_int_distribution<int32_t> id(3, 250);  // inside every tiny vocabulary (256+)
    for (int b = 0; b < batch; ++b) {
      prompts.emplace_back(2 + rng() % 20);
      for (auto& t : prompts.back()) t = id(rng);
    }
    const auto logits =
        test::teacher_forced({plain.get(), pdl_graphs.get(), pdl_eager.get()}, prompts, 6);
    for (size_t m = 1; m < logits.size(); ++m) {
      ASSERT_EQ(logits[m].size(), logits[0].size());
      for (size_t step = 0; step < logits[0].size(); ++step) {
        EXPECT_EQ(test::max_diff(logits[0][step], logits[m][step]), 0.0)
            << arch << (fused ? " fused" : " unfused") << " batch " << batch << " step " << step
            << ": " << (m == 1 ? "PDL, graphs" : "PDL, eager") << " differs from plain";
        EXPECT_TRUE(logits[0][step] == logits[m][step]) << "NaN logits";  // max_diff skips NaN
      }
    }
  }
  EXPECT_GT(cuda_model_stats(*pdl_graphs).graph_replays, 0);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

INSTANTIATE_TEST_SUITE_P(Tiny, PdlLogits,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "gemma",
                                                              "gemma2", "gemma3"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_fused" : "_unfused");
                         });

// The kernels alone, at Qwen3-0.6B's widths: 24 rounds of h = rmsnorm(x += o) -> gate_up =
// GEMV(h) -> act = silu_mul(gate_up) -> o = GEMV(act), every edge between two kernels of ours
// (the overlapping kind), in a captured graph and eagerly, PDL on vs off: x, h and o
// bit-equal. A kernel that read its predecessor's output before its wait would read a stale
// or half-written row here (each round changes every value).
std::vector<uint16_t> mlp_chain(int64_t m, bool pdl, bool graph) {
  constexpr int64_t H = 1024, I = 1024, kRounds = 24;
  std::mt19937_64 rng(4000 + m);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto bf = [](float f) { return float_to_bf16(f).bits; };
  std::vector<uint16_t> x(m * H), wn(H), wgu(2 * I * H), wd(H * I);
  for (auto& v : x) v = bf(u(rng));
  for (auto& v : wn) v = bf(1.0f + 0.1f * u(rng));
  for (auto& v : wgu) v = bf(0.05f * u(rng));
  for (auto& v : wd) v = bf(0.05f * u(rng));
  void *dx, *dwn, *dwgu, *dwd, *dh, *dgu, *dact, *dout;
  auto up = [](void** d, const std::vector<uint16_t>& h) {
    EXPECT_EQ(cudaMalloc(d, h.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(*d, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  };
  up(&dx, x);
  up(&dwn, wn);
  up(&dwgu, wgu);
  up(&dwd, wd);
  up(&dh, std::vector<uint16_t>(m * H, 0));
  up(&dgu, std::vector<uint16_t>(m * 2 * I, 0));
  up(&dact, std::vector<uint16_t>(m * I, 0));
  up(&dout, std::vector<uint16_t>(m * H, 0));  // o: zero, so round 0's add is x + 0
  cudaStream_t st = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cuda_model::Gemm gemm(0);
  gemm.use_gemv(true);
  const cuda_model::Launch on{st, pdl};
  auto body = [&] {
    for (int r = 0; r < kRounds; ++r) {
      cuda_model::add_rmsnorm(dx, dout, dwn, 1e-6f, dh, nullptr, m, H, on);
      gemm.run(dh, H, m, dwgu, 2 * I, H, dgu, 2 * I, on);
      cuda_model::silu_mul(dgu, m, I, dact, on);
      gemm.run(dact, I, m, dwd, H, I, dout, H, on);
    }
  };
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    body();
    EXPECT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  } else {
    body();
  }
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  std::vector<uint16_t> out(m * H * 3);
  EXPECT_EQ(cudaMemcpy(out.data(), dx, m * H * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data() + m * H, dh, m * H * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data() + 2 * m * H, dout, m * H * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (void* d : {dx, dwn, dwgu, dwd, dh, dgu, dact, dout}) cudaFree(d);
  cudaStreamDestroy(st);
  return out;
}

TEST(Pdl, KernelChainBitEqualAtQwen3Widths) {
  SKIP_WITHOUT_PDL();
  for (int64_t m : {1, 3, 8}) {
    const auto want = mlp_chain(m, false, false);
    for (bool graph : {false, true}) {
      EXPECT_TRUE(mlp_chain(m, false, graph) == want) << "plain, rows " << m;
      EXPECT_TRUE(mlp_chain(m, true, graph) == want)
          << "PDL " << (graph ? "graph" : "eager") << ", rows " << m << " differs from plain";
    }
  }
}

TEST(Pdl, TheOptionAndKVATTN_PDLReachTheModel) {
  auto pdl_of = [](bool option) {
    ModelOptions mo;
    mo.pdl = option;
    auto m = Model::create(load_hf_model(test::checkpoint("tiny_qwen3")), Device::cuda(0), mo);
    return cuda_model_stats(*m).pdl;
  };
  const bool supported = cuda_model::pdl_supported(0);
  EXPECT_EQ(pdl_of(true), supported);
  EXPECT_FALSE(pdl_of(false));
  setenv("KVATTN_PDL", "0", 1);
  EXPECT_FALSE(pdl_of(true));
  setenv("KVATTN_PDL", "1", 1);
  EXPECT_EQ(pdl_of(true), supported);
  unsetenv("KVATTN_PDL");
  std::printf("PDL %s on this device\n", supported ? "supported" : "not supported");
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
