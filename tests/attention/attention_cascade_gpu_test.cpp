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
#include "kvattn/kernels/store_kv.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

const Device kGpu = Device::cuda(0);

struct Case {
  int64_t seqs, heads, kv_heads, head_dim, block_size, prefix_blocks;
  float softcap;
  bool fp8;
};

Tensor on_gpu(const Tensor& host) { return host.to(kGpu); }

// max |plain - cascade| / max |plain| of one decode step (bf16 outputs).
double run_case(const Case& c, std::mt19937_64& rng, bool double_count = false) {
  const int64_t bs = c.block_size, P = c.prefix_blocks * bs;
  std::vector<int64_t> lens(static_cast<size_t>(c.seqs));
  for (auto& l : lens) l = P + test::uniform_int(rng, 1, 3 * bs + 40);
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t width = (max_len + bs - 1) / bs;
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
  const DType cache_dtype = c.fp8 ? DType::kF8E4M3 : DType::kBF16;
  Tensor kc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype, kGpu);
  Tensor vc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype, kGpu);
  Tensor ks, vs;
  if (c.fp8) {
    Tensor h = Tensor::empty({c.kv_heads}, DType::kF32);
    test::fill_random(h.view(), rng, 0.002f, 0.01f);
    ks = on_gpu(h);
    test::fill_random(h.view(), rng, 0.002f, 0.01f);
    vs = on_gpu(h);
  }
  {
    const int64_t slots = num_blocks * bs;
    Tensor k = Tensor::empty({slots, c.kv_heads, c.head_dim}, DType::kBF16);
    Tensor v = Tensor::empty({slots, c.kv_heads, c.head_dim}, DType::kBF16);
    test::fill_random(k.view(), rng, -1.5f, 1.5f);
    test::fill_random(v.view(), rng, -1.5f, 1.5f);
    std::vector<int64_t> all(static_cast<size_t>(slots));
    std::iota(all.begin(), all.end(), 0);
    const Tensor dk = on_gpu(k), dv = on_gpu(v), sm = on_gpu(test::int_tensor(all));
    store_kv(dk.view(), dv.view(), kc.view(), vc.view(), sm.view(), ks.view(), vs.view());
  }
  const int64_t tokens = c.seqs;
  Tensor qh = Tensor::empty({tokens, c.heads * c.head_dim}, DType::kBF16);
  test::fill_random(qh.view(), rng, -1.0f, 1.0f);
  const Tensor q = on_gpu(qh);
  AttentionMask mask;
  mask.softcap = c.softcap;
  Attention attn(c.heads, c.head_dim, 0.0f, c.kv_heads, mask);
  attn.bind_cache(kc.view(), vc.view(), ks.view(), vs.view());

  const Tensor bt = on_gpu(test::int_tensor_2d(table, c.seqs, width));
  const Tensor cl = on_gpu(test::int_tensor(lens));
  std::vector<int64_t> prefix_ids(ids.begin(), ids.begin() + c.prefix_blocks);
  const Tensor ct = on_gpu(test::int_tensor_2d(prefix_ids, 1, c.prefix_blocks));
  // The run of rows that takes the cascade: all of them, or a random inner run (the rows
  // outside it decode plainly).
  const int64_t lo = test::pick<int>(rng, {0, 1}) == 0 ? 0 : test::uniform_int(rng, 0, c.seqs - 1);
  const int64_t hi = lo == 0 && c.seqs > 1 ? c.seqs : test::uniform_int(rng, lo + 1, c.seqs);
  std::vector<int64_t> leftpad(static_cast<size_t>(c.seqs), 0);
  for (int64_t r = lo; r < hi; ++r) leftpad[r] = double_count ? 0 : P;
  const Tensor cu = on_gpu(test::int_tensor({0, hi - lo, 0, P}));
  const Tensor lp = on_gpu(test::int_tensor(leftpad));
  const int64_t ws_bytes = cascade_workspace_bytes(tokens, c.heads, c.head_dim, DType::kBF16);
  const Tensor ws = Tensor::empty({ws_bytes}, DType::kU8, kGpu);
  BatchContext plain;
  plain.phase = Phase::kDecode;
  plain.kv_stored = true;
  plain.context_lens = cl.view();
  plain.block_tables = bt.view();
  plain.decode_plan = plan_decode(c.seqs, c.heads, c.kv_heads, c.head_dim, 1, max_len, kGpu);
  const Tensor dws =
      Tensor::empty({std::max<int64_t>(plain.decode_plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  plain.decode_workspace = dws.view();
  BatchContext cascade = plain;
  cascade.cascade_prefix_len = P;
  cascade.cascade_first_row = lo;
  cascade.cascade_num_rows = hi - lo;
  cascade.cascade_block_table = ct.view();
  cascade.cascade_cu_seqlens = cu.view();
  cascade.cascade_leftpad = lp.view();
  cascade.cascade_workspace = ws.view();

  const Tensor kv = Tensor::empty({tokens, c.kv_heads * c.head_dim}, DType::kBF16, kGpu);
  Tensor poisoned = Tensor::empty({tokens, c.heads * c.head_dim}, DType::kBF16);
  test::poison(poisoned.view());
  Tensor out_plain = on_gpu(poisoned), out_cascade = on_gpu(poisoned);
  attn.forward(q.view(), kv.view(), kv.view(), plain, out_plain.view());
  attn.forward(q.view(), kv.view(), kv.view(), cascade, out_cascade.view());
  EXPECT_EQ(read_device_faults(kGpu, true), 0u);
  const std::vector<double> a = test::to_doubles(out_plain.to(Device::cpu()).view());
  const std::vector<double> b = test::to_doubles(out_cascade.to(Device::cpu()).view());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << "element " << i;
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  return worst / std::max(scale, 1e-30);
}

TEST(AttentionCascadeGpu, EqualsThePlainDecode) {
  const int cases = test::quick_mode() ? 8 : 60;
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = test::case_seed() + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    Case c;
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
  EXPECT_GT(run_case(Case{8, 16, 8, 128, 16, 8, 0.0f, false}, rng, /*double_count=*/true), 5e-2);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
