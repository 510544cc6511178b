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
#include "kvattn/kernels/store_kv.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

struct CascadeCase {
  int64_t seqs, heads, kv_heads, head_dim, block_size, prefix_blocks, q_len;
  float softcap;
  bool fp8;
};

// One decode step over `c.seqs` sequences whose first prefix_blocks blocks are the same cache
// blocks and whose remaining blocks are their own (random lengths past the prefix), through
// the layer with and without the cascade fields. Returns the largest |plain - cascade| over
// the largest |plain|.
// double_count: the decode part starts at key 0 instead of after the prefix (a wrong
// cascade_leftpad), so the prefix counts twice: the comparison must see it.
double run_case(const CascadeCase& c, std::mt19937_64& rng, AttentionMask mask = {},
                bool double_count = false) {
  const int64_t bs = c.block_size, P = c.prefix_blocks * bs;
  std::vector<int64_t> lens(static_cast<size_t>(c.seqs));
  for (auto& l : lens) l = P + test::uniform_int(rng, c.q_len, 3 * bs + c.q_len);
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t width = (max_len + bs - 1) / bs;
  // Block ids: the shared prefix first, then each sequence's own blocks, all shuffled.
  int64_t num_blocks = c.prefix_blocks;
  for (int64_t l : lens) num_blocks += (l + bs - 1) / bs - c.prefix_blocks;
  std::vector<int64_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int64_t> table(static_cast<size_t>(c.seqs * width), -1);
  size_t next = static_cast<size_t>(c.prefix_blocks);
  for (int64_t b = 0; b < c.seqs; ++b) {
    for (int64_t j = 0; j < (lens[b] + bs - 1) / bs; ++j) {
      table[b * width + j] = j < c.prefix_blocks ? ids[j] : ids[next++];
    }
  }
  const DType cache_dtype = c.fp8 ? DType::kF8E4M3 : DType::kF32;
  Tensor kc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype);
  Tensor vc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype);
  Tensor ks, vs;
  if (c.fp8) {
    ks = Tensor::empty({c.kv_heads}, DType::kF32);
    vs = Tensor::empty({c.kv_heads}, DType::kF32);
    test::fill_random(ks.view(), rng, 0.002f, 0.02f);
    test::fill_random(vs.view(), rng, 0.002f, 0.02f);
  }
  {  // every cached key and value, written through store_kv (the fp8 bytes included)
    const int64_t slots = num_blocks * bs;
    Tensor k = Tensor::empty({slots, c.kv_heads, c.head_dim}, DType::kF32);
    Tensor v = Tensor::empty({slots, c.kv_heads, c.head_dim}, DType::kF32);
    test::fill_random(k.view(), rng, -1.5f, 1.5f);
    test::fill_random(v.view(), rng, -1.5f, 1.5f);
    std::vector<int64_t> all(static_cast<size_t>(slots));
    std::iota(all.begin(), all.end(), 0);
    const Tensor sm = test::int_tensor(all);
    store_kv(k.view(), v.view(), kc.view(), vc.view(), sm.view(), ks.view(), vs.view());
  }
  const int64_t tokens = c.seqs * c.q_len;
  Tensor q = Tensor::empty({tokens, c.heads * c.head_dim}, DType::kF32);
  test::fill_random(q.view(), rng, -1.0f, 1.0f);
  Attention attn(c.heads, c.head_dim, 0.0f, c.kv_heads, mask);
  attn.bind_cache(kc.view(), vc.view(), ks.view(), vs.view());

  const Tensor bt = test::int_tensor_2d(table, c.seqs, width);
  const Tensor cl = test::int_tensor(lens);
  BatchContext plain;
  plain.phase = Phase::kDecode;
  plain.kv_stored = true;  // the step's keys are already in the cache
  plain.context_lens = cl.view();
  plain.block_tables = bt.view();
  std::vector<int64_t> prefix_ids(ids.begin(), ids.begin() + c.prefix_blocks);
  const Tensor ct = test::int_tensor_2d(prefix_ids, 1, c.prefix_blocks);
  // The run of rows that takes the cascade: all of them, or a random inner run (the rows
  // outside it decode plainly).
  const int64_t lo = test::pick<int>(rng, {0, 1}) == 0 ? 0 : test::uniform_int(rng, 0, c.seqs - 1);
  const int64_t hi = lo == 0 ? c.seqs : test::uniform_int(rng, lo + 1, c.seqs);
  std::vector<int64_t> leftpad(static_cast<size_t>(c.seqs), 0);
  for (int64_t r = lo; r < hi; ++r) leftpad[r] = double_count ? 0 : P;
  const Tensor cu = test::int_tensor({0, (hi - lo) * c.q_len, 0, P});
  const Tensor lp = test::int_tensor(leftpad);
  BatchContext cascade = plain;
  cascade.cascade_prefix_len = P;
  cascade.cascade_first_row = lo;
  cascade.cascade_num_rows = hi - lo;
  cascade.cascade_block_table = ct.view();
  cascade.cascade_cu_seqlens = cu.view();
  cascade.cascade_leftpad = lp.view();

  Tensor empty_kv = Tensor::empty({tokens, c.kv_heads * c.head_dim}, DType::kF32);
  Tensor out_plain = Tensor::empty({tokens, c.heads * c.head_dim}, DType::kF32);
  Tensor out_cascade = Tensor::empty({tokens, c.heads * c.head_dim}, DType::kF32);
  test::poison(out_plain.view());
  test::poison(out_cascade.view());
  attn.forward(q.view(), empty_kv.view(), empty_kv.view(), plain, out_plain.view());
  attn.forward(q.view(), empty_kv.view(), empty_kv.view(), cascade, out_cascade.view());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < out_plain.numel(); ++i) {
    const double a = out_plain.ptr<float>()[i], b = out_cascade.ptr<float>()[i];
    EXPECT_TRUE(std::isfinite(a) && std::isfinite(b)) << "element " << i;
    worst = std::max(worst, std::abs(a - b));
    scale = std::max(scale, std::abs(a));
  }
  return worst / std::max(scale, 1e-30);
}

TEST(AttentionCascade, EqualsThePlainDecode) {
  const int cases = test::case_count(60, 15);
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = test::case_seed() + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    CascadeCase c;
    c.seqs = test::uniform_int(rng, 2, 9);
    c.kv_heads = test::uniform_int(rng, 1, 3);
    c.heads = c.kv_heads * test::uniform_int(rng, 1, 4);
    c.head_dim = test::pick<int64_t>(rng, {16, 32, 64});
    c.block_size = test::pick<int64_t>(rng, {1, 4, 16});
    c.prefix_blocks = test::uniform_int(rng, 1, c.block_size == 1 ? 40 : 5);
    c.q_len = test::pick<int64_t>(rng, {1, 1, 3});
    c.softcap = test::pick<float>(rng, {0.0f, 0.0f, 5.0f});
    c.fp8 = test::pick<int>(rng, {0, 0, 1}) == 1;
    AttentionMask mask;
    mask.softcap = c.softcap;
    const double err = run_case(c, rng, mask);
    EXPECT_LT(err, 1e-5) << test::case_note(i, seed, "cascade vs plain") << " seqs " << c.seqs
                         << " heads " << c.heads << "/" << c.kv_heads << " d" << c.head_dim
                         << " block " << c.block_size << " prefix blocks " << c.prefix_blocks
                         << " q_len " << c.q_len << " softcap " << c.softcap << " fp8 " << c.fp8;
  }
}

TEST(AttentionCascade, TheComparisonSeesAPrefixCountedTwice) {
  std::mt19937_64 rng(test::case_seed());
  const CascadeCase c{3, 4, 2, 32, 4, 3, 1, 0.0f, false};
  EXPECT_GT(run_case(c, rng, {}, /*double_count=*/true), 1e-3);
}

TEST(AttentionCascade, WindowAndAlibiLayersIgnoreTheCascadeFields) {
  std::mt19937_64 rng(test::case_seed());
  const CascadeCase c{4, 4, 2, 32, 4, 3, 1, 0.0f, false};
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
