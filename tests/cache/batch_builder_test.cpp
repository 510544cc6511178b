// Hand-written step scenarios for BatchMetadataBuilder; every tensor is checked element by
// element against values worked out from the block tables.
#include "kvattn/cache/batch_builder.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

using V = std::vector<int32_t>;

V values(const TensorView& t) {
  EXPECT_EQ(t.dtype, DType::kI32);
  EXPECT_TRUE(t.is_contiguous());
  const int32_t* p = t.ptr<int32_t>();
  return V(p, p + t.numel());
}

V iota_tokens(int32_t n, int32_t start = 100) {
  V v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Slots of positions [from, to) of s.
V slots(const Sequence& s, int64_t bs, int64_t from, int64_t to) {
  V out;
  for (int64_t p = from; p < to; ++p) {
    out.push_back(static_cast<int32_t>(s.block_table()[p / bs] * bs + p % bs));
  }
  return out;
}

V range(int32_t from, int32_t to) {
  V v;
  for (int32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

V join(std::initializer_list<V> parts) {
  V out;
  for (const V& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// s's block-table row padded with -1 to `width`, covering its first lk tokens.
V row(const Sequence& s, int64_t bs, int64_t lk, int64_t width) {
  V r(s.block_table().begin(), s.block_table().begin() + (lk + bs - 1) / bs);
  r.resize(static_cast<size_t>(width), -1);
  return r;
}

std::string error_of(BatchMetadataBuilder& b, std::vector<ScheduledSequence> batch,
                     BatchBuildOptions o = {}) {
  try {
    b.build(batch, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(BatchBuilder, PrefixHitInTheMiddleOfABlock) {
  const int64_t bs = 4;
  BlockManager m(16, bs);
  Sequence a(1, iota_tokens(10));
  m.allocate(a);
  m.mark_computed(a, 10);
  V tokens = iota_tokens(6);  // shares 6 tokens with a: block 0 fully, block 1 half
  V tail = {7, 8, 9, 10, 11};
  tokens.insert(tokens.end(), tail.begin(), tail.end());
  Sequence b(2, tokens);
  m.allocate(b);
  ASSERT_EQ(b.num_computed_tokens(), 4);  // only the full block is reused

  BatchMetadataBuilder builder(m);
  const BatchMetadata& md = builder.build(std::vector<ScheduledSequence>{{&b, 7}});
  EXPECT_EQ(md.ctx.phase, Phase::kPrefill);
  EXPECT_TRUE(md.reads_kv_from_cache);
  EXPECT_EQ(values(md.ctx.slot_mapping), slots(b, bs, 4, 11));
  EXPECT_EQ(values(md.positions), range(4, 11));
  EXPECT_EQ(values(md.token_ids), V(tokens.begin() + 4, tokens.end()));
  EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, 7}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, 11}));
  EXPECT_EQ(md.ctx.max_seqlen_q, 7);
  EXPECT_EQ(md.ctx.max_seqlen_k, 11);
  EXPECT_EQ(values(md.ctx.context_lens), (V{11}));
  ASSERT_TRUE(md.ctx.block_tables.defined());
  EXPECT_EQ(md.ctx.block_tables.size(1), 3);
  EXPECT_EQ(values(md.ctx.block_tables), row(b, bs, 11, 3));
  EXPECT_EQ(md.ctx.block_tables.ptr<int32_t>()[0], a.block_table()[0]);  // the shared block
}

TEST(BatchBuilder, PrefixHitOnAnExactBlockBoundary) {
  const int64_t bs = 4;
  BlockManager m(16, bs);
  Sequence a(1, iota_tokens(8));
  m.allocate(a);
  m.mark_computed(a, 8);
  Sequence b(2, join({iota_tokens(8), {1, 2, 3, 4}}));
  m.allocate(b);
  ASSERT_EQ(b.num_computed_tokens(), 8);
  Sequence c(3, iota_tokens(8));  // full hit: the last block is recomputed
  m.allocate(c);
  ASSERT_EQ(c.num_computed_tokens(), 4);

  BatchMetadataBuilder builder(m);
  const BatchMetadata& md =
      builder.build(std::vector<ScheduledSequence>{{&b, 4}, {&c, 4}});
  EXPECT_EQ(md.ctx.phase, Phase::kPrefill);
  EXPECT_TRUE(md.reads_kv_from_cache);
  EXPECT_EQ(values(md.ctx.slot_mapping), join({slots(b, bs, 8, 12), slots(c, bs, 4, 8)}));
  EXPECT_EQ(values(md.positions), join({range(8, 12), range(4, 8)}));
  EXPECT_EQ(values(md.token_ids), join({{1, 2, 3, 4}, range(104, 108)}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, 4, 8}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, 12, 20}));
  EXPECT_EQ(values(md.ctx.context_lens), (V{12, 8}));
  EXPECT_EQ(md.ctx.max_seqlen_q, 4);
  EXPECT_EQ(md.ctx.max_seqlen_k, 12);
  EXPECT_EQ(values(md.ctx.block_tables), join({row(b, bs, 12, 3), row(c, bs, 8, 3)}));
}

TEST(BatchBuilder, ChunkedPrefillAcrossThreeSteps) {
  const int64_t bs = 4;
  BlockManager m(16, bs);
  Sequence s(1, iota_tokens(10));
  m.allocate(s);
  BatchMetadataBuilder builder(m);
  const int64_t chunks[3] = {4, 4, 2};
  int64_t done = 0;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int64_t n = chunks[step];
    const BatchMetadata& md = builder.build(std::vector<ScheduledSequence>{{&s, n}});
    EXPECT_EQ(md.ctx.phase, Phase::kPrefill);
    // The first chunk has nothing cached: packed k/v. Later chunks read the earlier ones.
    EXPECT_EQ(md.reads_kv_from_cache, step > 0);
    EXPECT_EQ(md.ctx.block_tables.defined(), step > 0);
    EXPECT_EQ(values(md.ctx.slot_mapping), slots(s, bs, done, done + n));
    EXPECT_EQ(values(md.positions), range(static_cast<int32_t>(done), static_cast<int32_t>(done + n)));
    EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, static_cast<int32_t>(n)}));
    EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, static_cast<int32_t>(done + n)}));
    EXPECT_EQ(md.ctx.max_seqlen_k, done + n);
    if (step > 0) {
      const int64_t width = (done + n + bs - 1) / bs;
      EXPECT_EQ(values(md.ctx.block_tables), row(s, bs, done + n, width));
    }
    m.mark_computed(s, n);
    done += n;
  }
  EXPECT_EQ(s.num_computed_tokens(), 10);
  EXPECT_EQ(m.stats().num_cached_blocks, 2);
}

TEST(BatchBuilder, MixedPrefillAndDecode) {
  const int64_t bs = 4;
  BlockManager m(32, bs);
  Sequence d(1, iota_tokens(6));  // decoding: 6 computed, then one sampled token
  m.allocate(d);
  m.mark_computed(d, 6);
  d.append_token(42);
  m.append(d);
  Sequence p(2, iota_tokens(5, 300));  // fresh prompt
  m.allocate(p);
  Sequence q(3, iota_tokens(9, 500));  // second chunk of a chunked prefill
  m.allocate(q);
  m.mark_computed(q, 4);

  BatchMetadataBuilder builder(m);
  const BatchMetadata& md =
      builder.build(std::vector<ScheduledSequence>{{&d, 1}, {&p, 5}, {&q, 3}});
  EXPECT_EQ(md.ctx.phase, Phase::kPrefill);
  EXPECT_TRUE(md.reads_kv_from_cache);
  EXPECT_EQ(md.num_tokens, 9);
  EXPECT_EQ(md.num_seqs, 3);
  EXPECT_EQ(values(md.ctx.slot_mapping),
            join({slots(d, bs, 6, 7), slots(p, bs, 0, 5), slots(q, bs, 4, 7)}));
  EXPECT_EQ(values(md.positions), join({{6}, range(0, 5), range(4, 7)}));
  EXPECT_EQ(values(md.token_ids), join({{42}, range(300, 305), range(504, 507)}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, 1, 6, 9}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, 7, 12, 19}));
  EXPECT_EQ(values(md.ctx.context_lens), (V{7, 5, 7}));
  EXPECT_EQ(md.ctx.max_seqlen_q, 5);
  EXPECT_EQ(md.ctx.max_seqlen_k, 7);
  EXPECT_EQ(values(md.ctx.block_tables),
            join({row(d, bs, 7, 2), row(p, bs, 5, 2), row(q, bs, 7, 2)}));
}

TEST(BatchBuilder, DecodeStep) {
  const int64_t bs = 4;
  BlockManager m(32, bs);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.emplace_back(i, iota_tokens(3 + 4 * i, 100 * (i + 1)));
    m.allocate(seqs.back());
    m.mark_computed(seqs.back(), seqs.back().num_tokens());
    seqs.back().append_token(7 + i);
    m.append(seqs.back());
  }
  BatchMetadataBuilder builder(m);
  std::vector<ScheduledSequence> batch;
  for (auto& s : seqs) batch.push_back({&s, 1});
  const BatchMetadata& md = builder.build(batch);
  EXPECT_EQ(md.ctx.phase, Phase::kDecode);
  EXPECT_FALSE(md.reads_kv_from_cache);
  EXPECT_EQ(values(md.ctx.context_lens), (V{4, 8, 12}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, 1, 2, 3}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, 4, 12, 24}));
  EXPECT_EQ(values(md.positions), (V{3, 7, 11}));
  EXPECT_EQ(values(md.token_ids), (V{7, 8, 9}));
  EXPECT_EQ(values(md.ctx.slot_mapping),
            join({slots(seqs[0], bs, 3, 4), slots(seqs[1], bs, 7, 8), slots(seqs[2], bs, 11, 12)}));
  EXPECT_EQ(md.ctx.max_seqlen_q, 1);
  EXPECT_EQ(md.ctx.max_seqlen_k, 12);
  EXPECT_EQ(values(md.ctx.block_tables),
            join({row(seqs[0], bs, 4, 3), row(seqs[1], bs, 8, 3), row(seqs[2], bs, 12, 3)}));
}

// Four decoding sequences share 3 prefix-cached blocks (12 tokens, block size 4): the run
// saves 3 x 3 block reads, so the cascade form is set when both thresholds allow it and not
// otherwise.
TEST(BatchBuilder, CascadeNeedsItsMinimumPrefixAndSavedReads) {
  const int64_t bs = 4;
  BlockManager m(64, bs);
  const V prefix = iota_tokens(12);
  std::vector<Sequence> seqs;
  seqs.reserve(4);  // the batch keeps pointers
  for (int i = 0; i < 4; ++i) {
    V t = prefix;
    t.push_back(500 + i);
    t.push_back(600 + i);
    seqs.emplace_back(i, t);
    m.allocate(seqs.back());  // the 2nd to 4th find the 3 blocks in the prefix cache
    m.mark_computed(seqs.back(), seqs.back().num_tokens() - seqs.back().num_computed_tokens());
    seqs.back().append_token(7 + i);
    m.append(seqs.back());
  }
  for (int i = 1; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) ASSERT_EQ(seqs[i].block_table()[j], seqs[0].block_table()[j]);
  }
  std::vector<ScheduledSequence> batch;
  for (auto& s : seqs) batch.push_back({&s, 1});
  struct Case {
    int64_t min_prefix_blocks, min_saved_blocks, want_prefix_len;
  };
  for (const Case c : {Case{3, 0, 12}, Case{3, 9, 12}, Case{3, 10, 0}, Case{4, 0, 0},
                       Case{2, 9, 12}, Case{0, 0, 0}}) {
    BatchMetadataBuilder builder(m);
    BatchBuildOptions o;
    o.cascade_min_prefix_blocks = c.min_prefix_blocks;
    o.cascade_min_saved_blocks = c.min_saved_blocks;
    const BatchMetadata& md = builder.build(batch, o);
    SCOPED_TRACE(testing::Message() << "min prefix " << c.min_prefix_blocks << " blocks, min saved "
                                    << c.min_saved_blocks);
    EXPECT_EQ(md.ctx.cascade_prefix_len, c.want_prefix_len);
    if (c.want_prefix_len > 0) {
      EXPECT_EQ(md.ctx.cascade_first_row, 0);
      EXPECT_EQ(md.ctx.cascade_num_rows, 4);
      EXPECT_EQ(values(md.ctx.cascade_block_table),
                (V(seqs[0].block_table().begin(), seqs[0].block_table().begin() + 3)));
    }
  }
}

TEST(BatchBuilder, CudaGraphPaddingOfADecodeBatch) {
  const int64_t bs = 4;
  BlockManager m(32, bs);
  Sequence a(1, iota_tokens(5));
  Sequence b(2, iota_tokens(9, 200));
  for (Sequence* s : {&a, &b}) {
    m.allocate(*s);
    m.mark_computed(*s, s->num_tokens() - 1);
  }
  BatchMetadataBuilder builder(m);
  BatchBuildOptions opt;
  opt.pad_decode_batch_to = 4;
  opt.block_table_width = 6;
  const BatchMetadata& md = builder.build(std::vector<ScheduledSequence>{{&a, 1}, {&b, 1}}, opt);
  EXPECT_EQ(md.ctx.phase, Phase::kDecode);
  EXPECT_EQ(md.num_seqs, 4);
  EXPECT_EQ(md.num_tokens, 4);
  EXPECT_EQ(md.num_scheduled_seqs, 2);
  EXPECT_EQ(md.num_scheduled_tokens, 2);
  EXPECT_EQ(values(md.ctx.slot_mapping), join({slots(a, bs, 4, 5), slots(b, bs, 8, 9), {-1, -1}}));
  EXPECT_EQ(values(md.positions), (V{4, 8, 0, 0}));
  EXPECT_EQ(values(md.ctx.context_lens), (V{5, 9, 0, 0}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_q), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(md.ctx.cu_seqlens_k), (V{0, 5, 14, 14, 14}));
  EXPECT_EQ(md.ctx.block_tables.size(0), 4);
  EXPECT_EQ(md.ctx.block_tables.size(1), 6);
  EXPECT_EQ(values(md.ctx.block_tables),
            join({row(a, bs, 5, 6), row(b, bs, 9, 6), V(12, -1)}));

  // A prefill step is never padded, whatever the option says.
  Sequence p(3, iota_tokens(3));
  m.allocate(p);
  const BatchMetadata& pre = builder.build(std::vector<ScheduledSequence>{{&p, 3}}, opt);
  EXPECT_EQ(pre.ctx.phase, Phase::kPrefill);
  EXPECT_EQ(pre.num_seqs, 1);
  EXPECT_EQ(pre.num_tokens, 3);
  EXPECT_FALSE(pre.ctx.block_tables.defined());
}

TEST(BatchBuilder, RejectsBadBatches) {
  const int64_t bs = 4;
  BlockManager m(8, bs);
  Sequence s(1, iota_tokens(6));
  m.allocate(s);
  Sequence stranger(2, iota_tokens(3));
  BatchMetadataBuilder builder(m);
  auto has = [](const std::string& msg, const char* needle) {
    return msg.find(needle) != std::string::npos;
  };
  EXPECT_TRUE(has(error_of(builder, {}), "at least one sequence"));
  EXPECT_TRUE(has(error_of(builder, {{nullptr, 1}}), "batch[0].seq must not be null"));
  EXPECT_TRUE(has(error_of(builder, {{&s, 0}}), "num_new_tokens of sequence 1 must be in [1, 6]"));
  EXPECT_TRUE(has(error_of(builder, {{&s, 7}}), "but is 7"));
  EXPECT_TRUE(has(error_of(builder, {{&stranger, 1}}), "holds none"));
  EXPECT_TRUE(has(error_of(builder, {{&s, 2}, {&s, 1}}), "may appear once per step"));
  s.append_tokens(V{1, 2, 3});  // 9 tokens, blocks for 8
  EXPECT_TRUE(has(error_of(builder, {{&s, 9}}), "call BlockManager::append first"));
  m.append(s);
  m.mark_computed(s, 8);
  Sequence t(3, iota_tokens(2));
  m.allocate(t);
  m.mark_computed(t, 1);
  BatchBuildOptions o;
  o.pad_decode_batch_to = 1;
  EXPECT_TRUE(has(error_of(builder, {{&s, 1}, {&t, 1}}, o), "pad_decode_batch_to is 1"));
  o = {};
  o.block_table_width = 2;
  EXPECT_TRUE(has(error_of(builder, {{&s, 1}}, o), "needs 3 blocks"));
  o.block_table_width = -1;
  EXPECT_TRUE(has(error_of(builder, {{&s, 1}}, o), "block_table_width must be >= 0"));
  // After the errors the builder still works.
  const BatchMetadata& md = builder.build(std::vector<ScheduledSequence>{{&s, 1}, {&t, 1}});
  EXPECT_EQ(values(md.ctx.context_lens), (V{9, 2}));
}

TEST(BatchBuilder, ForkedSequencesWriteOnlyTheirOwnBlocks) {
  const int64_t bs = 4;
  BlockManager m(16, bs);
  Sequence p(1, iota_tokens(6));
  m.allocate(p);
  m.mark_computed(p, 6);
  std::vector<BlockCopy> copies;
  Sequence c = m.fork(p, 2, copies);
  p.append_token(1);
  c.append_token(2);
  m.append(p);
  m.append(c);
  BatchMetadataBuilder builder(m);
  const BatchMetadata& md = builder.build(std::vector<ScheduledSequence>{{&p, 1}, {&c, 1}});
  const V s = values(md.ctx.slot_mapping);
  EXPECT_NE(s[0] / bs, s[1] / bs);
  EXPECT_EQ(s[1] / bs, copies.at(0).dst);
  EXPECT_EQ(md.ctx.block_tables.ptr<int32_t>()[0], md.ctx.block_tables.ptr<int32_t>()[2]);
}

// The builder keeps block-table rows across builds and patches them; whatever the history
// (rows changing sequence, sequences freed and new ones allocated at the same address, widths
// changing, padding), the result must equal a fresh builder's.
TEST(BatchBuilder, IncrementalRowsMatchAFreshBuild) {
  const int64_t bs = 2;
  BlockManager m(400, bs);
  BatchMetadataBuilder kept(m);
  std::mt19937_64 rng(99);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<std::unique_ptr<Sequence>> seqs;
  SeqId next = 0;
  auto add = [&] {
    auto s = std::make_unique<Sequence>(next++, iota_tokens(static_cast<int32_t>(uni(1, 9)), 1000 * static_cast<int32_t>(next)));
    m.allocate(*s);
    m.mark_computed(*s, s->num_tokens() - 1);
    seqs.push_back(std::move(s));
  };
  for (int i = 0; i < 6; ++i) add();
  for (int step = 0; step < 400; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (uni(0, 5) == 0) {  // replace one: the new object often reuses the freed address
      const size_t i = static_cast<size_t>(uni(0, static_cast<int64_t>(seqs.size()) - 1));
      m.free(*seqs[i]);
      seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(i));
      add();
    }
    std::shuffle(seqs.begin(), seqs.end(), rng);
    std::vector<ScheduledSequence> batch;
    std::vector<Sequence*> scheduled;
    for (auto& s : seqs) {
      if (uni(0, 4) > 0 || (s == seqs.back() && batch.empty())) {
        batch.push_back({s.get(), 1});
        scheduled.push_back(s.get());
      }
    }
    BatchBuildOptions opt;
    if (uni(0, 2) == 0) opt.pad_decode_batch_to = static_cast<int64_t>(batch.size()) + uni(0, 2);
    if (uni(0, 2) == 0) opt.block_table_width = 64;
    const V got = values(kept.build(batch, opt).ctx.block_tables);
    BatchMetadataBuilder fresh(m);
    EXPECT_EQ(got, values(fresh.build(batch, opt).ctx.block_tables));
    for (Sequence* s : scheduled) {  // decode: the token is computed, the next one sampled
      m.mark_computed(*s, 1);
      s->append_token(5);
      m.append(*s);
    }
  }
}

}  // namespace
}  // namespace kvattn
