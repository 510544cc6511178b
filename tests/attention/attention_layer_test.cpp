// The Attention layer through a multi-step serving scenario, with a hand-made block
// allocation: prefill 3 sequences, 20 decode steps (with a CUDA-graph style padding row),
// then new requests that hit a cached prefix and read it through block tables, then more
// decode. Every output is checked against dense float64 attention over the full history.
// Also: an unbound or empty cache skips the store; ctx.kv_stored leaves it to the caller;
// fused-QKV views; output shape; errors.
#include "kvattn/attention/attention.h"
#include "kvattn/kernels/store_kv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "support/case_util.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using ::testing::HasSubstr;
using test::uniform_int;

struct LayerConfig {
  DType dt;
  int64_t heads, kv_heads, head_dim, block_size;
  float scale;  // <= 0: the layer's default
};

std::string describe(const LayerConfig& c) {
  std::ostringstream os;
  os << c.dt << " H " << c.heads << "/" << c.kv_heads << " D " << c.head_dim << " bs "
     << c.block_size << " scale " << c.scale;
  return os.str();
}

// One step's inputs: q, k, v as [tokens, H*D] views cut out of a fused QKV buffer.
struct StepInputs {
  Tensor fused;
  TensorView q, k, v;     // 2-D, as a model hands them over
  TensorView k3, v3, q3;  // 3-D views of the same memory, for the reference
};

StepInputs make_step(const LayerConfig& c, int64_t tokens, std::mt19937_64& rng) {
  const int64_t H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
  const int64_t row = (H + 2 * Hkv) * D + uniform_int(rng, 0, 1) * 8;
  StepInputs s;
  s.fused = Tensor::empty({std::max<int64_t>(tokens, 1), row}, c.dt);
  test::fill_random(s.fused.view(), rng, -2.0f, 2.0f);
  char* base = static_cast<char*>(s.fused.data());
  const int64_t es = dtype_size(c.dt);
  s.q = TensorView(base, c.dt, Device::cpu(), {tokens, H * D}, {row, 1});
  s.k = TensorView(base + H * D * es, c.dt, Device::cpu(), {tokens, Hkv * D}, {row, 1});
  s.v = TensorView(base + (H + Hkv) * D * es, c.dt, Device::cpu(), {tokens, Hkv * D}, {row, 1});
  s.q3 = TensorView(s.q.data, c.dt, Device::cpu(), {tokens, H, D}, {row, D, 1});
  s.k3 = TensorView(s.k.data, c.dt, Device::cpu(), {tokens, Hkv, D}, {row, D, 1});
  s.v3 = TensorView(s.v.data, c.dt, Device::cpu(), {tokens, Hkv, D}, {row, D, 1});
  return s;
}

// A sequence as the test's own scheduler sees it.
struct Seq {
  std::vector<int64_t> blocks;
  std::vector<double> k, v;  // full history, [len, Hkv, D]
  int64_t len = 0;
};

class Scenario {
 public:
  Scenario(const LayerConfig& c, uint64_t seed)
      : kBlocks(256 / c.block_size + 16),
        c_(c),
        rng_(seed),
        layer_(c.heads, c.head_dim, c.scale, c.kv_heads) {
    // K and V in one allocation: [num_blocks, 2, block_size, Hkv, D], poisoned (NaN).
    const int64_t block = c.block_size * c.kv_heads * c.head_dim;
    storage_ = Tensor::empty({kBlocks * 2 * block}, c.dt);
    test::poison(storage_.view());
    const int64_t es = dtype_size(c.dt);
    const std::vector<int64_t> shape = {kBlocks, c.block_size, c.kv_heads, c.head_dim};
    const std::vector<int64_t> strides = {2 * block, c.kv_heads * c.head_dim, c.head_dim, 1};
    k_cache_ = TensorView(storage_.data(), c.dt, Device::cpu(), shape, strides);
    v_cache_ = TensorView(static_cast<char*>(storage_.data()) + block * es, c.dt, Device::cpu(),
                          shape, strides);
    layer_.bind_cache(k_cache_, v_cache_);
    free_.resize(kBlocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), rng_);
  }

  // Prefill of new sequences (optionally sharing the first `shared_blocks` blocks of an
  // existing sequence: a prefix-cache hit read through block tables).
  struct NewSeq {
    int64_t new_tokens;
    int parent = -1;  // index into seqs_, or -1
    int64_t shared_blocks = 0;
  };
  void prefill(const std::vector<NewSeq>& news, bool paged, const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<int64_t> slots, cu_q{0}, cu_k{0};
    std::vector<int> ids;
    int64_t max_q = 0, max_k = 0;
    for (const NewSeq& n : news) {
      Seq s;
      if (n.parent >= 0) {
        const Seq& p = seqs_[n.parent];
        const int64_t row = c_.kv_heads * c_.head_dim;
        const int64_t shared = n.shared_blocks * c_.block_size;
        s.blocks.assign(p.blocks.begin(), p.blocks.begin() + n.shared_blocks);
        s.k.assign(p.k.begin(), p.k.begin() + shared * row);
        s.v.assign(p.v.begin(), p.v.begin() + shared * row);
        s.len = shared;
      }
      seqs_.push_back(s);
      ids.push_back(static_cast<int>(seqs_.size()) - 1);
      for (int64_t t = 0; t < n.new_tokens; ++t) slots.push_back(next_slot(seqs_.back(), t));
      cu_q.push_back(cu_q.back() + n.new_tokens);
      cu_k.push_back(cu_k.back() + seqs_.back().len + n.new_tokens);
      max_q = std::max(max_q, n.new_tokens);
      max_k = std::max(max_k, seqs_.back().len + n.new_tokens);
    }
    const int64_t tokens = cu_q.back();
    StepInputs in = make_step(c_, tokens, rng_);
    Tensor slot_t = test::int_tensor(slots, step_ % 2 ? DType::kI64 : DType::kI32);
    Tensor cu_q_t = test::int_tensor(cu_q), cu_k_t = test::int_tensor(cu_k);
    Tensor table;
    BatchContext ctx;
    ctx.phase = Phase::kPrefill;
    ctx.slot_mapping = slot_t;
    ctx.cu_seqlens_q = cu_q_t;
    ctx.cu_seqlens_k = paged ? cu_k_t : cu_q_t;
    ctx.max_seqlen_q = max_q;
    ctx.max_seqlen_k = paged ? max_k : max_q;
    if (paged) {
      table = block_table(ids, 0);
      ctx.block_tables = table;
    }
    Tensor out;
    ASSERT_NO_THROW(out = layer_.forward(in.q, in.k, in.v, ctx));
    ASSERT_EQ(out.view().ndim, 2);
    EXPECT_EQ(out.size(0), tokens);
    EXPECT_EQ(out.size(1), c_.heads * c_.head_dim);
    EXPECT_EQ(out.dtype(), c_.dt);

    // Append the new K/V to each history, then compare with dense attention.
    for (size_t b = 0; b < news.size(); ++b) append(seqs_[ids[b]], in, cu_q[b], cu_q[b + 1]);
    check(out.view(), in, cu_q, ids, what);
    ++step_;
  }

  // One decode step for `active` sequences, plus `padding` CUDA-graph padding rows.
  void decode(const std::vector<int>& active, int64_t padding, bool out_view,
              const std::string& what) {
    SCOPED_TRACE(what);
    const auto B = static_cast<int64_t>(active.size()) + padding;
    std::vector<int64_t> slots, lens;
    for (int id : active) {
      slots.push_back(next_slot(seqs_[id], 0));
      lens.push_back(seqs_[id].len + 1);
    }
    for (int64_t p = 0; p < padding; ++p) {
      slots.push_back(-1);
      lens.push_back(0);
    }
    StepInputs in = make_step(c_, B, rng_);
    Tensor slot_t = test::int_tensor(slots, step_ % 2 ? DType::kI64 : DType::kI32);
    Tensor lens_t = test::int_tensor(lens);
    std::vector<int> rows(active);
    for (int64_t p = 0; p < padding; ++p) rows.push_back(-1);
    Tensor table = block_table(rows, 1);
    BatchContext ctx;
    ctx.phase = Phase::kDecode;
    ctx.slot_mapping = slot_t;
    ctx.context_lens = lens_t;
    ctx.block_tables = table;
    ctx.max_seqlen_q = 1;
    ctx.max_seqlen_k = *std::max_element(lens.begin(), lens.end());
    const int64_t HD = c_.heads * c_.head_dim;
    Tensor out;
    TensorView out_v;
    test::RowBuffer padded;
    if (out_view) {  // caller-provided out with a token stride wider than H*D
      padded = test::make_rows(B, 1, HD, c_.dt, 5);
      out_v = TensorView(padded.view.data, c_.dt, Device::cpu(), {B, HD}, {HD + 5, 1});
      ASSERT_NO_THROW(layer_.forward(in.q, in.k, in.v, ctx, out_v));
      EXPECT_TRUE(test::untouched_outside(padded.storage, out_v)) << "wrote outside out";
    } else {
      ASSERT_NO_THROW(out = layer_.forward(in.q, in.k, in.v, ctx));
      ASSERT_EQ(out.view().ndim, 2);
      EXPECT_EQ(out.size(0), B);
      EXPECT_EQ(out.size(1), HD);
      out_v = out.view();
    }
    std::vector<int64_t> cu_q{0};
    std::vector<int> ids;
    for (size_t b = 0; b < active.size(); ++b) {
      append(seqs_[active[b]], in, static_cast<int64_t>(b), static_cast<int64_t>(b) + 1);
      cu_q.push_back(cu_q.back() + 1);
      ids.push_back(active[b]);
    }
    for (int64_t p = 0; p < padding; ++p) {
      cu_q.push_back(cu_q.back() + 1);
      ids.push_back(-1);  // padding row: no keys, zeros expected
    }
    check(out_v, in, cu_q, ids, what);
    ++step_;
  }

  // Every cache slot no sequence owns must still hold the poison; every owned slot must hold
  // exactly the K/V of its token (bit-exact: the store is a copy).
  void check_cache() {
    const int64_t row = c_.kv_heads * c_.head_dim;
    std::vector<bool> owned(static_cast<size_t>(kBlocks * c_.block_size), false);
    for (const Seq& s : seqs_) {
      std::vector<int64_t> tab(s.blocks);
      const auto keys = test::gather_paged(k_cache_, tab.data(), static_cast<int64_t>(tab.size()),
                                           s.len);
      const auto vals = test::gather_paged(v_cache_, tab.data(), static_cast<int64_t>(tab.size()),
                                           s.len);
      EXPECT_TRUE(keys == s.k) << "k_cache does not hold the keys of a sequence";
      EXPECT_TRUE(vals == s.v) << "v_cache does not hold the values of a sequence";
      for (int64_t j = 0; j < s.len; ++j) {
        owned[static_cast<size_t>(s.blocks[j / c_.block_size] * c_.block_size +
                                  j % c_.block_size)] = true;
      }
    }
    const int64_t es = dtype_size(c_.dt);
    int64_t dirty = 0;
    for (int64_t slot = 0; slot < kBlocks * c_.block_size; ++slot) {
      if (owned[static_cast<size_t>(slot)]) continue;
      for (const TensorView* cache : {&k_cache_, &v_cache_}) {
        const auto* p = static_cast<const uint8_t*>(cache->data) +
                        ((slot / c_.block_size) * cache->stride(0) +
                         (slot % c_.block_size) * row) * es;
        for (int64_t i = 0; i < row * es; ++i) dirty += p[i] != 0xFF;
      }
    }
    EXPECT_EQ(dirty, 0) << "bytes written to cache slots no token maps to";
  }

  int num_seqs() const { return static_cast<int>(seqs_.size()); }
  const Seq& seq(int i) const { return seqs_[i]; }
  Attention& layer() { return layer_; }

 private:
  const int64_t kBlocks;  // enough for every scenario's tokens

  // The slot of the sequence's token len + t (allocating a block when it starts one).
  int64_t next_slot(Seq& s, int64_t t) {
    const int64_t pos = s.len + t;
    if (pos / c_.block_size >= static_cast<int64_t>(s.blocks.size())) {
      if (free_.empty()) throw std::runtime_error("test allocator: out of blocks");
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    return s.blocks[pos / c_.block_size] * c_.block_size + pos % c_.block_size;
  }

  // int32 [rows, width] block table; -1 past each sequence's last block (and for padding).
  Tensor block_table(const std::vector<int>& rows, int64_t extra) {
    int64_t width = 1;
    for (int id : rows) {
      if (id >= 0) width = std::max<int64_t>(width, static_cast<int64_t>(seqs_[id].blocks.size()));
    }
    width += extra;
    std::vector<int64_t> v(rows.size() * width, -1);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] < 0) continue;
      const auto& blocks = seqs_[rows[r]].blocks;
      std::copy(blocks.begin(), blocks.end(), v.begin() + static_cast<int64_t>(r) * width);
    }
    return test::int_tensor_2d(v, static_cast<int64_t>(rows.size()), width);
  }

  void append(Seq& s, const StepInputs& in, int64_t begin, int64_t end) {
    const auto k = test::gather_rows(in.k3, begin, end);
    const auto v = test::gather_rows(in.v3, begin, end);
    s.k.insert(s.k.end(), k.begin(), k.end());
    s.v.insert(s.v.end(), v.begin(), v.end());
    s.len += end - begin;
  }

  // Rows cu_q[b]..cu_q[b+1] of `out` against dense float64 attention of those queries over
  // the full history of sequence ids[b] (the new tokens are its last ones; -1: no keys).
  void check(const TensorView& out2d, const StepInputs& in, const std::vector<int64_t>& cu_q,
             const std::vector<int>& ids, const std::string& what) {
    const int64_t H = c_.heads, Hkv = c_.kv_heads, D = c_.head_dim;
    const int64_t total = cu_q.back();
    const TensorView out(out2d.data, c_.dt, Device::cpu(), {total, H, D}, {out2d.stride(0), D, 1});
    test::RefAttention ref;
    ref.out.assign(static_cast<size_t>(total * H * D), 0.0);
    ref.lse.assign(static_cast<size_t>(H * total), 0.0);
    for (size_t b = 0; b < ids.size(); ++b) {
      const int64_t lq = cu_q[b + 1] - cu_q[b];
      const auto q = test::gather_rows(in.q3, cu_q[b], cu_q[b + 1]);
      static const std::vector<double> none;
      const Seq* s = ids[b] >= 0 ? &seqs_[ids[b]] : nullptr;
      test::attention_reference(q.data(), s ? s->k.data() : none.data(),
                                s ? s->v.data() : none.data(), lq, s ? s->len : 0, H, Hkv, D,
                                layer_.scale(), true, ref.out.data() + cu_q[b] * H * D,
                                ref.lse.data() + cu_q[b], total);
    }
    test::expect_attention_close(ref, out, TensorView(),
                                 std::string("layer ") + std::string(dtype_name(c_.dt)),
                                 what.substr(0, 34));
  }

  LayerConfig c_;
  std::mt19937_64 rng_;
  Attention layer_;
  Tensor storage_;
  TensorView k_cache_, v_cache_;
  std::vector<int64_t> free_;
  std::vector<Seq> seqs_;
  int step_ = 0;
};

void run_scenario(const LayerConfig& c, uint64_t seed) {
  SCOPED_TRACE(test::case_note(0, seed, describe(c)));
  Scenario s(c, seed);
  const double default_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  EXPECT_NEAR(s.layer().scale(), c.scale > 0 ? c.scale : default_scale, 1e-7);
  // Prefill 3 sequences over packed k/v (their K/V are also stored).
  s.prefill({{37}, {54}, {5}}, /*paged=*/false, "prefill 3 seqs packed");
  if (::testing::Test::HasFatalFailure()) return;
  s.check_cache();
  // 20 decode steps; every 4th with a padding row, every 3rd into a caller-provided out.
  for (int step = 0; step < 20; ++step) {
    s.decode({0, 1, 2}, step % 4 == 3 ? 1 : 0, step % 3 == 1,
             "decode step " + std::to_string(step));
    if (::testing::Test::HasFatalFailure()) return;
  }
  s.check_cache();
  // New requests: one shares 2 full blocks of seq 0 (57 tokens), one shares 3 blocks of seq 1
  // with a single new token (a full hit recomputes its last token), one is fresh; all read
  // their keys through block tables.
  const int64_t bs = c.block_size;
  ASSERT_GE(s.seq(0).len / bs, 2);
  ASSERT_GE(s.seq(1).len / bs, 3);
  s.prefill({{13, 0, 2}, {1, 1, 3}, {9}}, /*paged=*/true, "prefix-hit prefill via tables");
  if (::testing::Test::HasFatalFailure()) return;
  s.check_cache();
  // Everyone decodes a few more steps, the prefix-sharing requests included.
  for (int step = 0; step < 4; ++step) {
    s.decode({0, 1, 2, 3, 4, 5}, step == 2 ? 2 : 0, step == 1,
             "mixed decode step " + std::to_string(step));
    if (::testing::Test::HasFatalFailure()) return;
  }
  s.check_cache();
}

TEST(AttentionLayer, MultiStepScenarioMatchesDenseAttention) {
  const std::vector<LayerConfig> configs = {
      {DType::kF32, 8, 2, 64, 16, 0.0f},
      {DType::kF32, 4, 4, 128, 16, 0.0f},
      {DType::kF32, 8, 1, 40, 16, 0.2f},  // odd head_dim, custom scale, group 8
      {DType::kF32, 6, 3, 64, 1, 0.0f},   // page size 1
      {DType::kBF16, 8, 2, 64, 16, 0.0f},
      {DType::kBF16, 16, 2, 128, 16, 0.0f},
  };
  for (const LayerConfig& c : configs) {
    run_scenario(c, test::case_seed());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Before the pool exists (warm-up) forward skips the store and prefill runs on packed k/v:
// the slot mapping is never read (here it is out of range for any cache).
TEST(AttentionLayer, UnboundOrEmptyCacheSkipsTheStore) {
  const uint64_t seed = test::case_seed();
  SCOPED_TRACE(test::case_note(0, seed, "unbound cache"));
  std::mt19937_64 rng(seed);
  const LayerConfig c{DType::kF32, 8, 2, 64, 16, 0.0f};
  Attention unbound(c.heads, c.head_dim, c.scale, c.kv_heads);
  EXPECT_FALSE(unbound.has_cache());
  Attention empty_views(c.heads, c.head_dim, c.scale, c.kv_heads);
  empty_views.bind_cache(TensorView(), TensorView());
  EXPECT_FALSE(empty_views.has_cache());
  Tensor zero_blocks = Tensor::empty({0, 16, 2, 64}, DType::kF32);
  Attention zero_pool(c.heads, c.head_dim, c.scale, c.kv_heads);
  zero_pool.bind_cache(zero_blocks, zero_blocks);
  EXPECT_FALSE(zero_pool.has_cache());

  const std::vector<int64_t> lens = {7, 30, 1};
  std::vector<int64_t> cu{0};
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  StepInputs in = make_step(c, cu.back(), rng);
  Tensor slots = test::int_tensor(std::vector<int64_t>(cu.back(), 1 << 20));
  Tensor cu_t = test::int_tensor(cu);
  BatchContext ctx;
  ctx.phase = Phase::kPrefill;
  ctx.slot_mapping = slots;
  ctx.cu_seqlens_q = cu_t;
  ctx.cu_seqlens_k = cu_t;
  ctx.max_seqlen_q = ctx.max_seqlen_k = 30;
  const test::RefAttention ref =
      test::prefill_reference(in.q3, in.k3, in.v3, cu, cu, 1.0 / std::sqrt(64.0), true);
  for (Attention* layer : {&unbound, &empty_views, &zero_pool}) {
    Tensor out;
    ASSERT_NO_THROW(out = layer->forward(in.q, in.k, in.v, ctx));
    ASSERT_EQ(out.view().ndim, 2);
    EXPECT_EQ(out.size(1), 8 * 64);
    test::expect_attention_close(ref, out.view().reshape({cu.back(), 8, 64}), TensorView(),
                                 "layer float32", "no cache, packed prefill");
  }
  // 3-D [tokens, heads, dim] inputs work the same.
  Tensor out3;
  ASSERT_NO_THROW(out3 = unbound.forward(in.q3, in.k3, in.v3, ctx));
  EXPECT_EQ(out3.view().ndim, 2);
  test::expect_attention_close(ref, out3.view().reshape({cu.back(), 8, 64}), TensorView(),
                               "layer float32", "no cache, 3-D inputs");
}

// ctx.kv_stored: the caller (a model's fused RoPE + KV-write kernel) has written the step's K/V,
// so forward must not store them. Without the caller's write the cache stays byte for byte as
// it was; with it (store_kv by hand) the output and the cache equal a plain forward's.
TEST(AttentionLayer, KvStoredLeavesTheStoreToTheCaller) {
  const uint64_t seed = test::case_seed();
  SCOPED_TRACE(test::case_note(0, seed, "kv_stored"));
  std::mt19937_64 rng(seed);
  const LayerConfig c{DType::kF32, 4, 2, 16, 4, 0.0f};
  const int64_t blocks = 8;
  auto random_cache = [&] {
    Tensor t = Tensor::empty({blocks, c.block_size, c.kv_heads, c.head_dim}, c.dt);
    test::fill_random(t.view(), rng);
    return t;
  };
  auto copy_of = [](const Tensor& t) {
    Tensor u = Tensor::empty({t.numel()}, t.dtype());
    std::memcpy(u.data(), t.data(), t.nbytes());
    return u;
  };
  auto same_bytes = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  Tensor ka = random_cache(), va = random_cache();
  Tensor kb = Tensor::empty({blocks, c.block_size, c.kv_heads, c.head_dim}, c.dt);
  Tensor vb = Tensor::empty({blocks, c.block_size, c.kv_heads, c.head_dim}, c.dt);
  std::memcpy(kb.data(), ka.data(), ka.nbytes());
  std::memcpy(vb.data(), va.data(), va.nbytes());
  Attention plain(c.heads, c.head_dim, c.scale, c.kv_heads);
  Attention stored(c.heads, c.head_dim, c.scale, c.kv_heads);
  plain.bind_cache(ka, va);
  stored.bind_cache(kb, vb);

  // Decode: sequences of 5, 9 and 1 keys (this step's token last) and a pad row.
  const std::vector<int64_t> lens = {5, 9, 1, 0};
  const std::vector<int64_t> table = {0, 1, -1, 2, 3, 4, 5, -1, -1, -1, -1, -1};
  std::vector<int64_t> slots;
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t p = lens[b] - 1;
    slots.push_back(p < 0 ? -1 : table[b * 3 + p / c.block_size] * c.block_size + p % c.block_size);
  }
  Tensor slot_t = test::int_tensor(slots), lens_t = test::int_tensor(lens);
  Tensor table_t = test::int_tensor_2d(table, 4, 3);
  StepInputs in = make_step(c, 4, rng);
  BatchContext ctx;
  ctx.phase = Phase::kDecode;
  ctx.slot_mapping = slot_t;
  ctx.context_lens = lens_t;
  ctx.block_tables = table_t;
  ctx.max_seqlen_q = 1;
  ctx.max_seqlen_k = 9;
  const Tensor out_plain = plain.forward(in.q, in.k, in.v, ctx);

  ctx.kv_stored = true;
  const Tensor kb0 = copy_of(kb), vb0 = copy_of(vb);
  ASSERT_NO_THROW(stored.forward(in.q, in.k, in.v, ctx));
  EXPECT_TRUE(same_bytes(copy_of(kb), kb0) && same_bytes(copy_of(vb), vb0))
      << "forward with kv_stored wrote the cache";
  store_kv(in.k3, in.v3, kb, vb, slot_t);  // the caller's write
  const Tensor out_stored = stored.forward(in.q, in.k, in.v, ctx);
  EXPECT_TRUE(same_bytes(out_stored, out_plain));
  EXPECT_TRUE(same_bytes(copy_of(kb), copy_of(ka)) && same_bytes(copy_of(vb), copy_of(va)));

  // A packed prefill (no block tables) still reads k and v, and stores nothing.
  BatchContext pre;
  pre.phase = Phase::kPrefill;
  pre.kv_stored = true;
  Tensor cu = test::int_tensor({0, 4});
  Tensor pre_slots = test::int_tensor({0, 1, 2, 3});
  pre.slot_mapping = pre_slots;
  pre.cu_seqlens_q = pre.cu_seqlens_k = cu;
  pre.max_seqlen_q = pre.max_seqlen_k = 4;
  const Tensor kb1 = copy_of(kb);
  const Tensor pre_stored = stored.forward(in.q, in.k, in.v, pre);
  EXPECT_TRUE(same_bytes(copy_of(kb), kb1)) << "a kv_stored prefill wrote the cache";
  pre.kv_stored = false;
  EXPECT_TRUE(same_bytes(pre_stored, plain.forward(in.q, in.k, in.v, pre)));
}

TEST(AttentionLayer, BadConstructionAndContexts) {
  const auto error_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no kvattn::Error";
    return {};
  };
  EXPECT_THAT(error_of([] { Attention(6, 64, 0.0f, 4); }),
              testing::AllOf(HasSubstr("num_heads"), HasSubstr("6"), HasSubstr("4")));
  EXPECT_THAT(error_of([] { Attention(8, 0, 0.0f, 2); }), HasSubstr("head_dim"));
  EXPECT_THAT(error_of([] { Attention(8, 64, std::nanf(""), 2); }), HasSubstr("scale"));

  Attention layer(8, 64, 0.0f, 2);
  Tensor wrong = Tensor::empty({4, 16, 2, 128}, DType::kF32);
  EXPECT_THAT(error_of([&] { layer.bind_cache(wrong, wrong); }), HasSubstr("k_cache"));
  Tensor kc = Tensor::empty({4, 16, 2, 64}, DType::kF32);
  Tensor vc_small = Tensor::empty({3, 16, 2, 64}, DType::kF32);
  EXPECT_THAT(error_of([&] { layer.bind_cache(kc, vc_small); }), HasSubstr("v_cache"));

  std::mt19937_64 rng(test::case_seed());
  const LayerConfig c{DType::kF32, 8, 2, 64, 16, 0.0f};
  StepInputs in = make_step(c, 4, rng);
  Tensor cu = test::int_tensor({0, 4});
  Tensor slots = test::int_tensor({0, 1, 2, 3});
  Tensor lens = test::int_tensor({1, 1, 1, 1});
  Tensor table = test::int_tensor_2d({0, 1, 2, 3}, 4, 1);
  BatchContext decode;
  decode.phase = Phase::kDecode;
  decode.slot_mapping = slots;
  decode.context_lens = lens;
  decode.block_tables = table;
  EXPECT_THAT(error_of([&] { (void)layer.forward(in.q, in.k, in.v, decode); }),
              HasSubstr("cache"));
  BatchContext paged;
  paged.phase = Phase::kPrefill;
  paged.slot_mapping = slots;
  paged.cu_seqlens_q = cu;
  paged.cu_seqlens_k = cu;
  paged.block_tables = test::int_tensor_2d({0}, 1, 1);
  EXPECT_THAT(error_of([&] { (void)layer.forward(in.q, in.k, in.v, paged); }),
              HasSubstr("block_tables"));
  // q with the wrong number of columns (7 heads' worth).
  TensorView q7(in.q.data, DType::kF32, Device::cpu(), {4, 7 * 64}, {in.q.stride(0), 1});
  BatchContext packed;
  packed.phase = Phase::kPrefill;
  packed.slot_mapping = slots;
  packed.cu_seqlens_q = cu;
  packed.cu_seqlens_k = cu;
  EXPECT_THAT(error_of([&] { (void)layer.forward(q7, in.k, in.v, packed); }),
              testing::AllOf(HasSubstr("q"), HasSubstr("512"), HasSubstr("448")));
  // A bound cache: a bad slot is reported by the store, naming slot_mapping.
  layer.bind_cache(kc, kc);
  Tensor bad = test::int_tensor({0, 1, 64, 3});
  packed.slot_mapping = bad;
  EXPECT_THAT(error_of([&] { (void)layer.forward(in.q, in.k, in.v, packed); }),
              testing::AllOf(HasSubstr("slot_mapping"), HasSubstr("64")));
}

}  // namespace
}  // namespace kvattn
