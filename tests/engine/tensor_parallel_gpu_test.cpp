// The tensor-parallel CUDA path with one rank (NCCL communicator of size 1): sharded weights,
// vocab-sliced embedding, all-reduces after embed/o_proj/down_proj and the logits gather run
// exactly as with N ranks, and must give the plain model's logits bit for bit (a sum over
// one rank is the value itself), eager and from CUDA graphs (NCCL captured in the graph).
// Exits 77 without a CUDA device or without NCCL in the build.
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/parallel/tp_model.h"
#include "kvattn/core/device.h"
#include "engine_test_util.h"
#include "engine/tp_test_driver.h"

#ifdef KVATTN_WITH_NCCL
#include <cuda_runtime_api.h>

namespace kvattn {
namespace {

TEST(TensorParallelGpu, OneRankIsBitIdenticalToThePlainModel) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "cuda graphs" : "eager");
    ModelOptions mo;
    mo.cuda_graphs = graphs;
    mo.max_decode_batch = 8;
    auto plain = Model::create(load_hf_model(tp_test::tiny_qwen3_dir()), Device::cuda(0), mo);
    mo.tensor_parallel = 1;
    auto tp = make_tensor_parallel_model(load_hf_model(tp_test::tiny_qwen3_dir()), Device::cuda(0), mo);
    ASSERT_EQ(tp->config().vocab_size, plain->config().vocab_size);
    const auto prompts = tp_test::random_prompts(graphs ? 7 : 8, plain->config().vocab_size);
    const auto want = tp_test::run_steps(*plain, prompts, 8);
    const auto got = tp_test::run_steps(*tp, prompts, 8, want.argmax);
    for (size_t s = 0; s < want.logits.size(); ++s) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(std::memcmp(got.logits[s][i].data(), want.logits[s][i].data(),
                              want.logits[s][i].size() * sizeof(float)),
                  0)
            << "step " << s << " sequence " << i;
      }
    }
    // Device sampling through the gathered logits: greedy equals the host argmax.
    std::vector<RowSampling> rows(1);
    std::vector<int32_t> token(1, -1);
    BlockManager bm(4, 16, false);
    BatchMetadataBuilder builder(bm);
    Sequence seq(0, prompts[2]);
    tp->allocate_kv_cache(4, 16);
    bm.allocate(seq);
    const ScheduledSequence one{&seq, seq.num_uncomputed_tokens()};
    const BatchMetadata& meta = builder.build(std::span(&one, 1));
    std::vector<int32_t> logit_row = {static_cast<int32_t>(meta.num_tokens - 1)};
    ModelInput in{{meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)},
                  {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)},
                  logit_row, &meta.ctx};
    ASSERT_TRUE(tp->samples_on_device());
    tp->forward_sample(in, rows, token);
    EXPECT_EQ(token[0], want.argmax[0][2]);
    bm.free(seq);
  }
}

// Gemma 2 / Gemma 3 through the same one-rank path (cuda_gemma.h; written without a GPU): the
// embedding all-reduce before the embedding scale, the o_proj / down_proj all-reduces before
// the sandwich norms, the final soft-cap after the logits gather; prompts past the window of
// 8 (the local layers, Gemma 3's local RoPE table). Gemma 1 (session 52): the all-reduces
// before its unnormed residual adds.
TEST(TensorParallelGpu, GemmaOneRankIsBitIdenticalToThePlainModel) {
  for (const std::string arch : {"gemma", "gemma2", "gemma3"}) {
    for (bool graphs : {false, true}) {
      SCOPED_TRACE(arch + (graphs ? " cuda graphs" : " eager"));
      const std::string dir = test::checkpoint("tiny_" + arch);
      ModelOptions mo;
      mo.cuda_graphs = graphs;
      mo.max_decode_batch = 8;
      auto plain = Model::create(load_hf_model(dir), Device::cuda(0), mo);
      mo.tensor_parallel = 1;
      auto tp = make_tensor_parallel_model(load_hf_model(dir), Device::cuda(0), mo);
      const auto prompts = tp_test::random_prompts(graphs ? 5 : 6, plain->config().vocab_size);
      const auto want = tp_test::run_steps(*plain, prompts, 8);
      const auto got = tp_test::run_steps(*tp, prompts, 8, want.argmax);
      for (size_t s = 0; s < want.logits.size(); ++s) {
        for (size_t i = 0; i < prompts.size(); ++i) {
          ASSERT_EQ(std::memcmp(got.logits[s][i].data(), want.logits[s][i].data(),
                                want.logits[s][i].size() * sizeof(float)),
                    0)
              << "step " << s << " sequence " << i;
        }
      }
    }
  }
}

TEST(TensorParallelGpu, RejectsMoreRanksThanGpus) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  ModelOptions mo;
  mo.tensor_parallel = 2;
  if (n >= 2) return;  // the 2-GPU test covers this machine
  try {
    Model::create(load_hf_model(tp_test::tiny_qwen3_dir()), Device::cuda(0), mo);
    ADD_FAILURE() << "tensor_parallel 2 accepted with " << n << " GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("are visible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvattn
#endif

int main(int argc, char** argv) { return kvattn::test::nccl_test_main(argc, argv); }
