// Cascade (shared-prefix) decode through the Attention layer (BatchContext::cascade_*): the
// shared blocks as one non-causal paged prefill of every query row, each row's own keys by the
// decode kernel from cache_leftpad on, merged by log-sum-exp. It must equal the plain decode of
// the same step: float32 caches to float32 rounding, fp8 caches likewise (both paths read the
// same bytes), for GQA groups 1-4, block sizes 1 / 4 / 16, q_len 1 and 3, softcap on and off,
// prefixes of one block up to all but the last key; and a windowed or ALiBi layer ignores the
// cascade fields (the same bits as without them). Fresh random inputs per case, NaN-poisoned
// outputs. Also the builder: BatchBuildOptions::cascade_min_prefix_blocks finds the shared
// leading blocks of a decode batch and leaves each row a key of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvattn/attention/attention.h"
#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "cascade_case.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::CascadeRun;
using test::CascadeSpec;

// CPU: float32 activations; the rest as the spec says.
double run_case(const CascadeSpec& c, std::mt19937_64& rng, AttentionMask mask = {},
                bool double_count = false) {
  CascadeRun run;
  run.mask = mask;
  run.double_count = double_count;
  return test::cascade_vs_plain(c, run, rng);
}

TEST(AttentionCascade, EqualsThePlainDecode) {
  const int cases = test::case_count(60, 15);
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = test::case_seed() + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    CascadeSpec c;
    c.seqs = test::uniform_int(rng, 2, 9);
    c.kv_heads = test::uniform_int(rng, 1, 3);
    c.heads = c.kv_heads * test::uniform_int(rng, 1, 4);
    c.head_dim = test::pick<int64_t>(rng, {16, 32, 64});
    c.block_size = test::pick<int64_t>(rng, {1, 4, 16});
    c.prefix_blocks = test::uniform_int(rng, 1, c.block_size == 1 ? 40 : 5);
    c.q_len = test::pick<int64_t>(rng, {1, 1, 3});
    c.softcap = test::pick<float>(rng, {0.0f, 0.0f, 5.0f});
    c.fp8 = test::pick<int>(rng, {0, 0, 1}) == 1;
    const double err = run_case(c, rng);
    EXPECT_LT(err, 1e-5) << test::case_note(i, seed, "cascade vs plain") << " seqs " << c.seqs
                         << " heads " << c.heads << "/" << c.kv_heads << " d" << c.head_dim
                         << " block " << c.block_size << " prefix blocks " << c.prefix_blocks
                         << " q_len " << c.q_len << " softcap " << c.softcap << " fp8 " << c.fp8;
  }
}

TEST(AttentionCascade, TheComparisonSeesAPrefixCountedTwice) {
  std::mt19937_64 rng(test::case_seed());
  const CascadeSpec c{3, 4, 2, 32, 4, 3, 1, 0.0f, false};
  EXPECT_GT(run_case(c, rng, {}, /*double_count=*/true), 1e-3);
}

TEST(AttentionCascade, WindowAndAlibiLayersIgnoreTheCascadeFields) {
  std::mt19937_64 rng(test::case_seed());
  const CascadeSpec c{4, 4, 2, 32, 4, 3, 1, 0.0f, false};
  AttentionMask window;
  window.window_left = 5;
  EXPECT_EQ(run_case(c, rng, window), 0.0);
  AttentionMask alibi;
  alibi.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  EXPECT_EQ(run_case(c, rng, alibi), 0.0);
}

TEST(AttentionCascade, RejectsMalformedFields) {
  const int64_t H = 2, D = 16, bs = 4;
  Tensor kc = Tensor::empty({4, bs, 1, D}, DType::kF32), vc = Tensor::empty({4, bs, 1, D}, DType::kF32);
  test::poison(kc.view());
  Attention attn(H, D, 0.0f, 1);
  attn.bind_cache(kc.view(), vc.view());
  Tensor q = Tensor::empty({2, H * D}, DType::kF32), kv = Tensor::empty({2, D}, DType::kF32);
  const Tensor bt = test::int_tensor_2d({0, 1, 0, 2}, 2, 2), cl = test::int_tensor({6, 7});
  const Tensor ct = test::int_tensor_2d({0}, 1, 1), cu = test::int_tensor({0, 2, 0, 4});
  const Tensor lp = test::int_tensor({4, 4});
  BatchContext ctx;
  ctx.phase = Phase::kDecode;
  ctx.kv_stored = true;
  ctx.context_lens = cl.view();
  ctx.block_tables = bt.view();
  ctx.cascade_prefix_len = 4;
  ctx.cascade_num_rows = 2;
  ctx.cascade_block_table = ct.view();
  ctx.cascade_cu_seqlens = cu.view();
  ctx.cascade_leftpad = lp.view();
  auto expect_error = [&](BatchContext c, const char* what) {
    try {
      attn.forward(q.view(), kv.view(), kv.view(), c);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  BatchContext c = ctx;
  c.cascade_prefix_len = 3;
  expect_error(c, "cascade_prefix_len");
  c = ctx;
  c.cascade_block_table = TensorView();
  expect_error(c, "cascade_block_table");
  c = ctx;
  c.cascade_cu_seqlens = cl.view();
  expect_error(c, "cascade_cu_seqlens");
  c = ctx;
  c.cascade_leftpad = ct.view();
  expect_error(c, "cascade_leftpad");
  c = ctx;
  c.cascade_first_row = 1;
  expect_error(c, "cascade_first_row");
}

// The builder marks the shared leading blocks of a decode batch (prefix caching shares them).
TEST(AttentionCascade, BuilderFindsTheSharedPrefix) {
  const int64_t bs = 4;
  BlockManager bm(64, bs, /*enable_prefix_caching=*/true);
  BatchMetadataBuilder builder(bm);
  std::vector<int32_t> prompt(22);
  std::iota(prompt.begin(), prompt.end(), 3);
  std::vector<Sequence> seqs;
  seqs.reserve(3);
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> p = prompt;
    p.push_back(100 + s);  // the 23rd token differs
    seqs.emplace_back(static_cast<SeqId>(s), p);
  }
  // Prefill the first sequence, so its full blocks enter the prefix cache; the others hit them.
  bm.allocate(seqs[0]);
  bm.mark_computed(seqs[0], seqs[0].num_tokens());
  for (int s = 1; s < 3; ++s) {
    bm.allocate(seqs[s]);
    EXPECT_EQ(seqs[s].num_cached_tokens(), 20) << "5 full blocks of 4 shared";
    bm.mark_computed(seqs[s], seqs[s].num_tokens() - seqs[s].num_computed_tokens());
  }
  for (auto& s : seqs) {
    s.append_token(7);
    bm.append(s);
  }
  // A sequence of its own first in the batch: the run is the three sharing rows after it.
  std::vector<int32_t> other(30, 9);
  Sequence alone(static_cast<SeqId>(9), other);
  bm.allocate(alone);
  bm.mark_computed(alone, alone.num_tokens());
  alone.append_token(7);
  bm.append(alone);
  std::vector<ScheduledSequence> batch{{&alone, 1}};
  for (auto& s : seqs) batch.push_back({&s, 1});
  BatchBuildOptions opts;
  opts.cascade_min_prefix_blocks = 2;
  const BatchMetadata& m = builder.build(batch, opts);
  ASSERT_EQ(m.ctx.phase, Phase::kDecode);
  EXPECT_EQ(m.ctx.cascade_prefix_len, 20);
  EXPECT_EQ(m.ctx.cascade_first_row, 1);
  EXPECT_EQ(m.ctx.cascade_num_rows, 3);
  EXPECT_EQ(m.ctx.cascade_leftpad.ptr<int32_t>()[0], 0);
  ASSERT_TRUE(m.ctx.cascade_block_table.defined());
  EXPECT_EQ(m.ctx.cascade_block_table.size(1), 5);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(m.ctx.cascade_block_table.ptr<int32_t>()[j], seqs[0].block_table()[j]);
  }
  EXPECT_EQ(m.ctx.cascade_cu_seqlens.ptr<int32_t>()[1], 3);
  EXPECT_EQ(m.ctx.cascade_cu_seqlens.ptr<int32_t>()[3], 20);
  for (int64_t r = 1; r < 4; ++r) EXPECT_EQ(m.ctx.cascade_leftpad.ptr<int32_t>()[r], 20);
  // Above the shared length: off. Off by default.
  opts.cascade_min_prefix_blocks = 6;
  EXPECT_EQ(builder.build(batch, opts).ctx.cascade_prefix_len, 0);
  EXPECT_EQ(builder.build(batch).ctx.cascade_prefix_len, 0);
  for (auto& s : seqs) bm.free(s);
  bm.free(alone);
}

}  // namespace
}  // namespace kvattn
