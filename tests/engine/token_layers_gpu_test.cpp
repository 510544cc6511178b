// The token kernel (src/engine/model/token_layers: one decode token of one sequence through
// every layer in one persistent kernel; on unless KVATTN_TOKEN_KERNEL=0) against the layered
// CUDA path:
// - teacher-forced logits of batch-1 decode steps, graphs and eager, on the tiny Llama, Qwen3
//   (q/k norms), Llama 3 (scaled RoPE table, tied embeddings) and Phi-4-mini (partial rotary)
//   checkpoints, at context lengths around the kernel's piece (32 keys) and round (64 keys)
//   sizes and at pages of 1, 16 and 256 tokens. The kernel sums the projections in another
//   order and keeps the attention in fp32, so the logits agree to rounding, not bit for bit:
//   the largest difference is bounded relative to the logits' scale, and the argmax may differ
//   only where the reference's top two are within a near-tie;
// - the kernel really ran (CudaModelStats) on exactly the steps whose context it takes (longer
//   single contexts keep the layered path), and the device fault word stays 0;
// - a float8_e4m3 cache the same way (the kernel reads the codes times the KV head's scales
//   and writes the token's own K and V as store_kv quantises them; the layered path reads them
//   back through the fp8 decode kernels), with scales other than 1;
// - models it does not cover (biases, a sliding window, Gemma) keep the layered path; it is on
//   by default (KVATTN_TOKEN_KERNEL=0 turns it off), in its five-phase form.
// - the three-phase form (KVATTN_TOKEN_FLOW=1, token_flow.cu) the same way, and graphs and
//   eager give the same bits with either form (its split-K sums are fixed point).
// KVATTN_TOKEN_TEST_MODEL=<HF folder> adds the same comparison on that model (the device
// scripts pass a random Qwen3-0.6B: head_dim 128). Exits 77 without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "kvattn/kernels/device_faults.h"
#include "teacher_forced.h"

#ifdef KVATTN_WITH_CUDA
#include "engine/model/cuda_model.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

// Sets KVATTN_TOKEN_KERNEL and KVATTN_TOKEN_FLOW for the scope (the model reads them at
// construction).
struct TokenEnv {
  TokenEnv(bool on, bool flow) {
    setenv("KVATTN_TOKEN_KERNEL", on ? "1" : "0", 1);
    setenv("KVATTN_TOKEN_FLOW", flow ? "1" : "0", 1);
  }
  ~TokenEnv() {
    unsetenv("KVATTN_TOKEN_KERNEL");
    unsetenv("KVATTN_TOKEN_FLOW");
  }
};

std::unique_ptr<Model> make_model(const std::string& dir, bool token, bool graphs,
                                  KVCacheDType kv = KVCacheDType::kAuto, bool flow = false) {
  TokenEnv env(token, flow);
  ModelOptions mo;
  mo.cuda_graphs = graphs;
  mo.max_decode_batch = 8;
  mo.kv_cache_dtype = kv;
  return Model::create(load_hf_model(dir), Device::cuda(0), mo);
}

struct Case {
  int64_t prompt_len, block_size, num_blocks;
};

// The layered path vs the token kernel (graphs and eager; `flow`: the three-phase form) over
// every case: one prompt, a prefill (layered for both) and `steps` decode steps; `kv` the
// three models' cache dtype (fp8: with `fp8_scales` for every layer's K and V heads).
void compare_on(const std::string& dir, const std::vector<Case>& cases, int steps, bool flow,
                KVCacheDType kv = KVCacheDType::kAuto, float fp8_scale = 1.0f) {
  auto ref = make_model(dir, false, true, kv);
  auto graphs = make_model(dir, true, true, kv, flow);
  auto eager = make_model(dir, true, false, kv, flow);
  if (kv == KVCacheDType::kFP8) {
    const ModelConfig& c = ref->config();
    const size_t n = static_cast<size_t>(c.num_layers * c.num_kv_heads);
    std::vector<float> ks(n), vs(n);
    for (size_t i = 0; i < n; ++i) {
      ks[i] = fp8_scale * (1.0f + 0.125f * static_cast<float>(i % 5));
      vs[i] = fp8_scale * (1.5f - 0.125f * static_cast<float>(i % 3));
    }
    for (Model* m : {ref.get(), graphs.get(), eager.get()}) m->set_kv_scales(ks, vs);
  }
  ASSERT_FALSE(cuda_model_stats(*ref).token_kernel);
  const int64_t vocab = ref->config().vocab_size;
  std::mt19937_64 rng(7100);
  for (const Case& c : cases) {
    std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(std::min<int64_t>(vocab, 320)) - 1);
    std::vector<int32_t> prompt(c.prompt_len);
    for (auto& t : prompt) t = id(rng);
    const int64_t before = cuda_model_stats(*graphs).token_kernel_steps;
    const auto logits = test::teacher_forced({ref.get(), graphs.get(), eager.get()}, {prompt},
                                             steps, false, c.num_blocks, c.block_size);
    const CudaModelStats st = cuda_model_stats(*graphs);
    ASSERT_TRUE(st.token_kernel) << dir << ": the kernel is not bound";
    ASSERT_EQ(st.token_kernel_flow, flow) << dir << ": the kernel's form";
    // Decode steps see prompt_len + 1 .. prompt_len + steps keys: those within the kernel's
    // single-round capacity take it, longer ones keep the layered path (its rung-1 twin). A
    // one-token prompt's first step is itself one token over its own key: the kernel takes it.
    int64_t want = c.prompt_len == 1 ? 1 : 0;
    for (int s = 1; s <= steps; ++s) want += c.prompt_len + s <= st.token_kernel_max_context;
    EXPECT_EQ(st.token_kernel_steps - before, want)
        << dir << " prompt " << c.prompt_len << ": steps through the token kernel";
    for (size_t m = 1; m < logits.size(); ++m) {
      const std::string what = dir.substr(dir.find_last_of('/') + 1) + " prompt " +
                               std::to_string(c.prompt_len) + " page " +
                               std::to_string(c.block_size) + (m == 1 ? " graphs" : " eager");
      // Step 0 is the prefill (the layered path in every model, unless the prompt is one
      // token): equal.
      if (c.prompt_len > 1) EXPECT_EQ(test::max_diff(logits[0][0], logits[m][0]), 0.0) << what;
      float scale = 1.0f;
      for (const auto& step : logits[0]) {
        for (float v : step) scale = std::max(scale, std::fabs(v));
      }
      const test::Agreement a = test::compare(logits[0], logits[m], vocab, what.c_str());
      EXPECT_LE(a.max_logit_diff, 0.03 * scale) << what << ": logits differ beyond rounding";
      EXPECT_LE(a.worst_margin, 0.03f * scale) << what << ": argmax differs away from a near-tie";
      for (float v : logits[m].back()) ASSERT_TRUE(std::isfinite(v)) << what;
    }
    // The same kernel replayed by a graph and launched eagerly: the same bits (the three-phase
    // form's split-K sums are fixed point, so the order the CTAs add in does not show).
    for (size_t s = 0; s < logits[1].size(); ++s) {
      EXPECT_EQ(test::max_diff(logits[1][s], logits[2][s]), 0.0)
          << dir << " prompt " << c.prompt_len << " step " << s << ": graphs vs eager";
    }
  }
  EXPECT_GT(cuda_model_stats(*graphs).token_kernel_steps, 0) << "the kernel never ran (graphs)";
  EXPECT_GT(cuda_model_stats(*eager).token_kernel_steps, 0) << "the kernel never ran (eager)";
  EXPECT_EQ(cuda_model_stats(*ref).token_kernel_steps, 0);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

// Lengths around the piece size (32 keys: 31 / 33 / 64 / 65 keys after the first steps),
// 2,200 keys (above the tiny models' single-round capacity, 32 pieces x 64 keys: the layered
// path, through rung 1's twin graph), and pages 1 and 256.
const std::vector<Case> kCases = {
    {1, 16, 64},  {2, 16, 64},  {29, 16, 64}, {62, 16, 64}, {300, 16, 64},
    {2200, 16, 160}, {45, 1, 256}, {700, 256, 8},
};

// (model, the three-phase form).
class TokenLayers : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(TokenLayers, TeacherForcedLogitsMatchTheLayeredPath) {
  compare_on(test::checkpoint("tiny_" + std::get<0>(GetParam())), kCases, 6,
             std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Tiny, TokenLayers,
                         ::testing::Combine(::testing::Values("llama", "qwen3", "llama3",
                                                              "phi4mini"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_flow" : "");
                         });

// A float8_e4m3 cache (session 40: the token kernel reads it), on a model with q/k norms and
// one without, in both forms, with scales around 0.02 (the tiny models' K and V are small:
// scales of 1 would leave most codes subnormal).
TEST(TokenLayers, Fp8CacheMatchesTheLayeredPath) {
  const std::vector<Case> cases = {{2, 16, 64}, {62, 16, 64}, {300, 16, 64}, {45, 1, 256}};
  for (const char* m : {"tiny_qwen3", "tiny_llama"}) {
    for (bool flow : {false, true}) {
      SCOPED_TRACE(std::string(m) + (flow ? " flow" : ""));
      compare_on(test::checkpoint(m), cases, 6, flow, KVCacheDType::kFP8, 0.02f);
    }
  }
}

// KVATTN_TOKEN_TEST_MODEL's comparison (registered by main only when it is set).
class GivenModelFolder : public ::testing::Test {
 public:
  explicit GivenModelFolder(std::string dir) : dir_(std::move(dir)) {}
  void TestBody() override {
    for (bool flow : {false, true}) {
      compare_on(dir_, {{5, 16, 512}, {130, 16, 512}, {1500, 16, 512}, {600, 256, 16}}, 8, flow);
    }
  }

 private:
  std::string dir_;
};

void register_model_folder_test() {
  const char* dir = std::getenv("KVATTN_TOKEN_TEST_MODEL");
  if (dir == nullptr || *dir == 0) return;
  const std::string d = dir;
  ::testing::RegisterTest("TokenLayersModel", "GivenModelFolder", nullptr, d.c_str(), __FILE__,
                          __LINE__, [d]() -> ::testing::Test* { return new GivenModelFolder(d); });
}

TEST(TokenLayers, ModelsItDoesNotCoverKeepTheLayeredPath) {
  for (const char* m : {"tiny_qwen2", "tiny_mistral", "tiny_gemma2"}) {
    auto model = make_model(test::checkpoint(m), true, true);
    model->allocate_kv_cache(16, 16);
    EXPECT_FALSE(cuda_model_stats(*model).token_kernel) << m;
  }
  auto off = make_model(test::checkpoint("tiny_llama"), false, true);
  off->allocate_kv_cache(16, 16);
  EXPECT_FALSE(cuda_model_stats(*off).token_kernel) << "KVATTN_TOKEN_KERNEL=0";
  {  // on by default, in its five-phase form
    unsetenv("KVATTN_TOKEN_KERNEL");
    unsetenv("KVATTN_TOKEN_FLOW");
    ModelOptions mo;
    auto by_default = Model::create(load_hf_model(test::checkpoint("tiny_llama")), Device::cuda(0), mo);
    by_default->allocate_kv_cache(16, 16);
    EXPECT_TRUE(cuda_model_stats(*by_default).token_kernel) << "by default";
    EXPECT_FALSE(cuda_model_stats(*by_default).token_kernel_flow) << "by default";
  }
  auto on = make_model(test::checkpoint("tiny_llama"), true, true);
  on->allocate_kv_cache(16, 16);
  EXPECT_TRUE(cuda_model_stats(*on).token_kernel) << "tiny_llama with the switch";
  EXPECT_FALSE(cuda_model_stats(*on).token_kernel_flow) << "the five-phase form by default";
  auto flow = make_model(test::checkpoint("tiny_llama"), true, true, KVCacheDType::kAuto, true);
  flow->allocate_kv_cache(16, 16);
  EXPECT_TRUE(cuda_model_stats(*flow).token_kernel_flow) << "KVATTN_TOKEN_FLOW=1";
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
#ifdef KVATTN_WITH_CUDA
  kvattn::register_model_folder_test();
#endif
  return kvattn::test::gpu_test_main(argc, argv);
}
