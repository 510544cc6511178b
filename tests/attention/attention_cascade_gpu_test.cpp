// Cascade (shared-prefix) decode through the Attention layer on CUDA: the Hopper/sm_80 paged
// prefill over the shared blocks, the decode kernel from cache_leftpad on, merge_attention_states
// (all on the layer's stream, no allocation) against the plain decode of the same step, bf16 and
// fp8 caches, GQA 1-8, head_dim 64/128/256 (fp8: 64/128), pages 1/16/256, batches 2-64,
// softcap on and off; a prefix counted twice (wrong cache_leftpad) must show; the device fault
// word stays 0. Fresh random inputs per case, NaN-poisoned outputs. Exits 77 without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvattn/attention/attention.h"
#include "kvattn/kernels/device_faults.h"
#include "cascade_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::CascadeSpec;

// CUDA: bfloat16 activations (and caches unless fp8), q_len 1.
double run_case(const CascadeSpec& c, std::mt19937_64& rng, bool double_count = false) {
  test::CascadeRun run;
  run.act = DType::kBF16;
  run.device = Device::cuda(0);
  run.double_count = double_count;
  const double err = test::cascade_vs_plain(c, run, rng);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
  return err;
}

TEST(AttentionCascadeGpu, EqualsThePlainDecode) {
  const int cases = test::quick_mode() ? 8 : 60;
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = test::case_seed() + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    CascadeSpec c;
    c.q_len = 1;
    c.fp8 = test::pick<int>(rng, {0, 0, 1}) == 1;
    c.seqs = test::pick<int64_t>(rng, {2, 5, 17, 64});
    c.kv_heads = test::uniform_int(rng, 1, 4);
    c.heads = c.kv_heads * test::pick<int64_t>(rng, {1, 2, 3, 4, 8});
    c.head_dim = c.fp8 ? test::pick<int64_t>(rng, {64, 128}) : test::pick<int64_t>(rng, {64, 128, 256});
    c.block_size = test::pick<int64_t>(rng, {1, 16, 16, 256});
    c.prefix_blocks = c.block_size == 1 ? test::uniform_int(rng, 1, 300)
                      : c.block_size == 16 ? test::uniform_int(rng, 1, 40)
                                           : test::uniform_int(rng, 1, 3);
    c.softcap = c.fp8 ? 0.0f : test::pick<float>(rng, {0.0f, 0.0f, 30.0f});
    const double err = run_case(c, rng);
    // Two bf16 partial results merged in float32, against one bf16 result: a few bf16 ulps.
    EXPECT_LT(err, 2e-2) << test::case_note(i, seed, "cascade vs plain") << " seqs " << c.seqs
                         << " heads " << c.heads << "/" << c.kv_heads << " d" << c.head_dim
                         << " block " << c.block_size << " prefix blocks " << c.prefix_blocks
                         << " softcap " << c.softcap << " fp8 " << c.fp8;
  }
}

TEST(AttentionCascadeGpu, TheComparisonSeesAPrefixCountedTwice) {
  std::mt19937_64 rng(test::case_seed());
  EXPECT_GT(run_case(CascadeSpec{8, 16, 8, 128, 16, 8, 1, 0.0f, false}, rng, /*double_count=*/true), 5e-2);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
