// The Attention layer with a per-layer sliding window and softcap (AttentionMask), as an
// engine alternating local and global layers uses it: a packed prefill, a paged prefill over
// a cached prefix, and decode steps, each through a local and a global layer on the same
// inputs, checked against the float64 reference with the layer's mask (ALiBi slopes too); bad
// masks are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kvattn/attention/attention.h"
#include "support/case_util.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using ::testing::HasSubstr;

constexpr int64_t H = 4, Hkv = 2, D = 64, kBlock = 16, kBlocks = 16;

struct Layer {
  Attention attn;
  Tensor kc = Tensor::empty({kBlocks, kBlock, Hkv, D}, DType::kF32);
  Tensor vc = Tensor::empty({kBlocks, kBlock, Hkv, D}, DType::kF32);
  explicit Layer(AttentionMask mask) : attn(H, D, 0.0f, Hkv, mask) {
    attn.bind_cache(kc.view(), vc.view());
  }
};

test::RefMask ref_mask(const AttentionMask& m) {
  return {m.window_left, -1, static_cast<double>(m.softcap),
          std::vector<double>(m.alibi_slopes.begin(), m.alibi_slopes.end()), false, 0};
}

Tensor random(std::mt19937_64& rng, int64_t tokens, int64_t heads) {
  Tensor t = Tensor::empty({tokens, heads, D}, DType::kF32);
  test::fill_random(t.view(), rng, -2.0f, 2.0f);
  return t;
}

// One sequence in blocks 3, 7, 0, 12, ...: prefill `prompt` tokens (packed), then a second
// prefill chunk of `chunk` tokens reading the cached prefix (paged), then `steps` decodes.
void run_scenario(const AttentionMask& mask, int64_t prompt, int64_t chunk, int64_t steps) {
  SCOPED_TRACE("window_left " + std::to_string(mask.window_left) + " softcap " +
               std::to_string(mask.softcap) + " alibi slopes " +
               std::to_string(mask.alibi_slopes.size()));
  std::mt19937_64 rng(test::case_seed());
  Layer layer(mask);
  const std::vector<int64_t> blocks = {3, 7, 0, 12, 5, 9, 1};
  Tensor table = test::int_tensor_2d(blocks, 1, static_cast<int64_t>(blocks.size()));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto slots = [&](int64_t from, int64_t n) {
    std::vector<int64_t> s;
    for (int64_t j = from; j < from + n; ++j) s.push_back(blocks[j / kBlock] * kBlock + j % kBlock);
    return test::int_tensor(s);
  };
  const auto check = [&](const Tensor& out, const test::RefAttention& ref, const char* what) {
    SCOPED_TRACE(what);
    const int64_t tokens = out.view().size(0);
    test::expect_attention_close(ref, out.view().reshape({tokens, H, D}), TensorView(),
                                 "attention layer window", what);
  };

  // 1. Packed prefill of the prompt.
  Tensor q = random(rng, prompt, H), k = random(rng, prompt, Hkv), v = random(rng, prompt, Hkv);
  Tensor cu = test::int_tensor({0, prompt}), sm = slots(0, prompt);
  BatchContext ctx;
  ctx.slot_mapping = sm.view();
  ctx.cu_seqlens_q = cu.view();
  ctx.cu_seqlens_k = cu.view();
  ctx.max_seqlen_q = ctx.max_seqlen_k = prompt;
  Tensor out = layer.attn.forward(q.view(), k.view(), v.view(), ctx);
  check(out, test::prefill_reference(q.view(), k.view(), v.view(), {0, prompt}, {0, prompt},
                                     scale, true, ref_mask(mask)),
        "packed prefill");

  // 2. A chunk that reads the cached prompt through the block table.
  const int64_t total = prompt + chunk;
  q = random(rng, chunk, H), k = random(rng, chunk, Hkv), v = random(rng, chunk, Hkv);
  Tensor cu_q = test::int_tensor({0, chunk}), cu_k = test::int_tensor({0, total});
  sm = slots(prompt, chunk);
  ctx.slot_mapping = sm.view();
  ctx.cu_seqlens_q = cu_q.view();
  ctx.cu_seqlens_k = cu_k.view();
  ctx.max_seqlen_q = chunk;
  ctx.max_seqlen_k = total;
  ctx.block_tables = table.view();
  out = layer.attn.forward(q.view(), k.view(), v.view(), ctx);
  check(out, test::paged_prefill_reference(q.view(), layer.kc.view(), layer.vc.view(),
                                           table.view(), {0, chunk}, {0, total}, scale, true,
                                           ref_mask(mask)),
        "paged prefill over the prefix");

  // 3. Decode steps.
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t len = total + s + 1;
    q = random(rng, 1, H), k = random(rng, 1, Hkv), v = random(rng, 1, Hkv);
    sm = slots(len - 1, 1);
    Tensor lens = test::int_tensor({len});
    BatchContext dc;
    dc.phase = Phase::kDecode;
    dc.slot_mapping = sm.view();
    dc.context_lens = lens.view();
    dc.block_tables = table.view();
    out = layer.attn.forward(q.view(), k.view(), v.view(), dc);
    check(out, test::decode_reference(q.view(), layer.kc.view(), layer.vc.view(), table.view(),
                                      lens.view(), 1, scale, true, ref_mask(mask)),
          "decode");
  }
}

TEST(AttentionWindow, LocalAndGlobalLayersMatchTheReference) {
  for (const AttentionMask& m : {AttentionMask{}, AttentionMask{0, 0.0f}, AttentionMask{5, 0.0f},
                                 AttentionMask{-1, 30.0f}, AttentionMask{24, 2.0f},
                                 AttentionMask{500, 0.0f},
                                 AttentionMask{-1, 0.0f, {0.5f, 0.25f, 0.125f, 0.0625f}},
                                 AttentionMask{6, 20.0f, {1.0f, 0.0f, 0.3f, 2.0f}}}) {
    run_scenario(m, 37, 20, 9);
  }
}

TEST(AttentionWindow, TheWindowChangesTheResult) {
  // Same inputs through a local and a global layer: they must differ once the sequence is
  // longer than the window (so the mask really reaches the kernels).
  std::mt19937_64 rng(test::case_seed());
  Tensor q = random(rng, 40, H), k = random(rng, 40, Hkv), v = random(rng, 40, Hkv);
  Tensor cu = test::int_tensor({0, 40});
  BatchContext ctx;
  ctx.cu_seqlens_q = ctx.cu_seqlens_k = cu.view();
  ctx.max_seqlen_q = ctx.max_seqlen_k = 40;
  Attention global(H, D, 0.0f, Hkv), local(H, D, 0.0f, Hkv, AttentionMask{8, 0.0f});
  const Tensor a = global.forward(q.view(), k.view(), v.view(), ctx);
  const Tensor b = local.forward(q.view(), k.view(), v.view(), ctx);
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  // Rows 0..8 see the same keys in both layers; row 39 does not.
  for (int64_t x = 0; x < 9 * H * D; ++x) ASSERT_EQ(pa[x], pb[x]) << x;
  double diff = 0.0;
  for (int64_t x = 39 * H * D; x < 40 * H * D; ++x) diff += std::abs(pa[x] - pb[x]);
  EXPECT_GT(diff, 1e-3);
  EXPECT_EQ(local.mask().window_left, 8);
  EXPECT_EQ(global.mask().window_left, -1);
}

TEST(AttentionWindow, BadMasksAreRefused) {
  try {
    Attention bad(H, D, 0.0f, Hkv, AttentionMask{-2, 0.0f});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("window_left"));
    EXPECT_THAT(e.what(), HasSubstr("-2"));
  }
  try {
    Attention bad(H, D, 0.0f, Hkv, AttentionMask{-1, -3.0f});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("softcap"));
    EXPECT_THAT(e.what(), HasSubstr("-3"));
  }
  try {
    Attention bad(H, D, 0.0f, Hkv, AttentionMask{-1, std::nanf("")});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("softcap"));
    EXPECT_THAT(e.what(), HasSubstr("finite"));
  }
  try {
    Attention bad(H, D, 0.0f, Hkv, AttentionMask{-1, 0.0f, {0.5f, 0.5f}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("alibi_slopes must have num_heads (4) entries but has 2"));
  }
  try {
    Attention bad(H, D, 0.0f, Hkv, AttentionMask{-1, 0.0f, {0.5f, 0.5f, INFINITY, 0.5f}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("alibi_slopes[2] must be finite"));
  }
}

}  // namespace
}  // namespace kvattn
