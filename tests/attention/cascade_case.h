// One decode step whose sequences share leading cache blocks, for the cascade tests on the CPU
// (attention_cascade_test) and CUDA (attention_cascade_gpu_test): random lengths past the
// shared prefix, shuffled block ids, every slot written through store_kv on the device (the
// fp8 bytes included), and the step run through the Attention layer with and without the
// cascade fields over a random run of rows. compare() gives max |plain - cascade| / max |plain|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvattn/attention/attention.h"
#include "kvattn/kernels/store_kv.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn::test {

struct CascadeSpec {
  int64_t seqs, heads, kv_heads, head_dim, block_size, prefix_blocks, q_len;
  float softcap;
  bool fp8;
};

struct CascadeRun {
  DType act = DType::kF32;    // q, k, v and out: float32 (CPU) or bfloat16 (CUDA)
  Device device = Device::cpu();
  AttentionMask mask;
  // The decode part starts at key 0 instead of after the prefix (a wrong cascade_leftpad), so
  // the prefix counts twice: a comparison must see it.
  bool double_count = false;
};

inline Tensor to_device(const Tensor& host, Device d) { return d.is_cpu() ? host : host.to(d); }

// max |plain - cascade| / max |plain| over the step's outputs; non-finite outputs fail.
inline double cascade_vs_plain(const CascadeSpec& c, const CascadeRun& run,
                               std::mt19937_64& rng) {
  const Device dev = run.device;
  const int64_t bs = c.block_size, P = c.prefix_blocks * bs;
  std::vector<int64_t> lens(static_cast<size_t>(c.seqs));
  for (auto& l : lens) l = P + uniform_int(rng, c.q_len, 3 * bs + c.q_len + 40);
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t width = (max_len + bs - 1) / bs;
  // Block ids: the shared prefix's, then each sequence's own, all shuffled.
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
  const DType cache_dtype = c.fp8 ? DType::kF8E4M3 : run.act;
  Tensor kc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype, dev);
  Tensor vc = Tensor::empty({num_blocks, bs, c.kv_heads, c.head_dim}, cache_dtype, dev);
  Tensor ks, vs;
  if (c.fp8) {
    Tensor h = Tensor::empty({c.kv_heads}, DType::kF32);
    fill_random(h.view(), rng, 0.002f, 0.02f);
    ks = to_device(h, dev);
    Tensor h2 = Tensor::empty({c.kv_heads}, DType::kF32);
    fill_random(h2.view(), rng, 0.002f, 0.02f);
    vs = to_device(h2, dev);
  }
  {  // every cached key and value, through store_kv
    const int64_t slots = num_blocks * bs;
    Tensor k = Tensor::empty({slots, c.kv_heads, c.head_dim}, run.act);
    Tensor v = Tensor::empty({slots, c.kv_heads, c.head_dim}, run.act);
    fill_random(k.view(), rng, -1.5f, 1.5f);
    fill_random(v.view(), rng, -1.5f, 1.5f);
    std::vector<int64_t> all(static_cast<size_t>(slots));
    std::iota(all.begin(), all.end(), 0);
    const Tensor dk = to_device(k, dev), dv = to_device(v, dev);
    const Tensor sm = to_device(int_tensor(all), dev);
    store_kv(dk.view(), dv.view(), kc.view(), vc.view(), sm.view(), ks.view(), vs.view());
  }
  const int64_t tokens = c.seqs * c.q_len;
  Tensor qh = Tensor::empty({tokens, c.heads * c.head_dim}, run.act);
  fill_random(qh.view(), rng, -1.0f, 1.0f);
  const Tensor q = to_device(qh, dev);
  AttentionMask mask = run.mask;
  mask.softcap = c.softcap;
  Attention attn(c.heads, c.head_dim, 0.0f, c.kv_heads, mask);
  attn.bind_cache(kc.view(), vc.view(), ks.view(), vs.view());

  const Tensor bt = to_device(int_tensor_2d(table, c.seqs, width), dev);
  const Tensor cl = to_device(int_tensor(lens), dev);
  BatchContext plain;
  plain.phase = Phase::kDecode;
  plain.kv_stored = true;  // the step's keys are already in the cache
  plain.context_lens = cl.view();
  plain.block_tables = bt.view();
  Tensor dws;
  if (dev.is_cuda()) {
    plain.decode_plan =
        plan_decode(c.seqs, c.heads, c.kv_heads, c.head_dim, c.q_len, max_len, dev);
    dws = Tensor::empty({std::max<int64_t>(plain.decode_plan.workspace_bytes, 16)}, DType::kU8,
                        dev);
    plain.decode_workspace = dws.view();
  }
  // The run of rows that takes the cascade: all of them, or a random inner run (the rows
  // outside it decode plainly).
  const int64_t lo = pick<int>(rng, {0, 1}) == 0 ? 0 : uniform_int(rng, 0, c.seqs - 1);
  const int64_t hi = lo == 0 ? c.seqs : uniform_int(rng, lo + 1, c.seqs);
  std::vector<int64_t> leftpad(static_cast<size_t>(c.seqs), 0);
  for (int64_t r = lo; r < hi; ++r) leftpad[r] = run.double_count ? 0 : P;
  std::vector<int64_t> prefix_ids(ids.begin(), ids.begin() + c.prefix_blocks);
  const Tensor ct = to_device(int_tensor_2d(prefix_ids, 1, c.prefix_blocks), dev);
  const Tensor cu = to_device(int_tensor({0, (hi - lo) * c.q_len, 0, P}), dev);
  const Tensor lp = to_device(int_tensor(leftpad), dev);
  // fp8: room for the prefix dequantized (what the GPU's shared pass reads).
  const Tensor cws = Tensor::empty({cascade_workspace_bytes(tokens, c.heads, c.head_dim, run.act,
                                                            c.fp8 ? P : 0, c.fp8 ? c.kv_heads : 0)},
                                   DType::kU8, dev);
  BatchContext cascade = plain;
  cascade.cascade_prefix_len = P;
  cascade.cascade_first_row = lo;
  cascade.cascade_num_rows = hi - lo;
  cascade.cascade_block_table = ct.view();
  cascade.cascade_cu_seqlens = cu.view();
  cascade.cascade_leftpad = lp.view();
  cascade.cascade_workspace = cws.view();

  const Tensor kv = Tensor::empty({tokens, c.kv_heads * c.head_dim}, run.act, dev);
  Tensor poisoned = Tensor::empty({tokens, c.heads * c.head_dim}, run.act);
  poison(poisoned.view());
  Tensor out_plain = poisoned.to(dev), out_cascade = poisoned.to(dev);
  attn.forward(q.view(), kv.view(), kv.view(), plain, out_plain.view());
  attn.forward(q.view(), kv.view(), kv.view(), cascade, out_cascade.view());
  const std::vector<double> a = to_doubles(out_plain.to(Device::cpu()).view());
  const std::vector<double> b = to_doubles(out_cascade.to(Device::cpu()).view());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << "element " << i;
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace kvattn::test
