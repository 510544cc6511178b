// The Attention layer over a float8_e4m3 cache: it passes its bound scales to store_kv and to
// decode (the output equals the kernels called directly with those scales, bit for bit), and
// binding scales to a non-fp8 cache is rejected.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kvattn/attention/attention.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/store_kv.h"
#include "support/case_util.h"

namespace kvattn {
namespace {

TEST(AttentionFp8Cache, DecodeThroughTheLayerUsesTheBoundScales) {
  std::mt19937_64 rng(test::case_seed());
  const int64_t H = 6, hkv = 2, D = 16, bs = 4, nb = 3;
  Tensor kc = Tensor::empty({nb, bs, hkv, D}, DType::kF8E4M3);
  Tensor vc = Tensor::empty({nb, bs, hkv, D}, DType::kF8E4M3);
  Tensor ks = Tensor::empty({hkv}, DType::kF32), vs = Tensor::empty({hkv}, DType::kF32);
  ks.ptr<float>()[0] = 0.01f, ks.ptr<float>()[1] = 0.02f;
  vs.ptr<float>()[0] = 0.005f, vs.ptr<float>()[1] = 0.03f;
  // Fill 9 keys directly, then decode one new token through the layer.
  const int64_t L = 10;
  Tensor k0 = Tensor::empty({L - 1, hkv, D}, DType::kF32), v0 = Tensor::empty({L - 1, hkv, D}, DType::kF32);
  test::fill_random(k0.view(), rng, -2.0f, 2.0f);
  test::fill_random(v0.view(), rng, -2.0f, 2.0f);
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < L - 1; ++i) slots.push_back(i);
  Tensor sm0 = test::int_tensor(slots);
  store_kv(k0.view(), v0.view(), kc.view(), vc.view(), sm0.view(), ks.view(), vs.view());

  Tensor q = Tensor::empty({1, H * D}, DType::kF32), k = Tensor::empty({1, hkv * D}, DType::kF32),
         v = Tensor::empty({1, hkv * D}, DType::kF32);
  test::fill_random(q.view(), rng);
  test::fill_random(k.view(), rng);
  test::fill_random(v.view(), rng);
  Tensor sm = test::int_tensor({L - 1}), lens = test::int_tensor({L});
  Tensor bt = test::int_tensor_2d({0, 1, 2}, 1, 3);
  Attention attn(H, D, 0.0f, hkv);
  attn.bind_cache(kc.view(), vc.view(), ks.view(), vs.view());
  BatchContext ctx;
  ctx.phase = Phase::kDecode;
  ctx.slot_mapping = sm.view();
  ctx.context_lens = lens.view();
  ctx.block_tables = bt.view();
  const Tensor out = attn.forward(q.view(), k.view(), v.view(), ctx);

  // The same step by hand: the new token's bytes are the scaled quantisation...
  const uint8_t* row = kc.ptr<uint8_t>() + (L - 1) * hkv * D;
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t x = 0; x < D; ++x) {
      ASSERT_EQ(row[h * D + x], quantize_e4m3(k.ptr<float>()[h * D + x], ks.ptr<float>()[h]));
    }
  }
  // ...and the output equals decode_attention with the scales.
  Tensor ref = Tensor::empty({1, H, D}, DType::kF32);
  DecodeArgs a;
  a.q = q.view().reshape({1, H, D});
  a.k_cache = kc.view();
  a.v_cache = vc.view();
  a.k_scale = ks.view();
  a.v_scale = vs.view();
  a.block_table = bt.view();
  a.cache_seqlens = lens.view();
  a.out = ref.view();
  decode_attention(a);
  EXPECT_EQ(std::memcmp(out.data(), ref.data(), static_cast<size_t>(ref.nbytes())), 0);
  // Without the scales the layer would compute something else: the scales matter here.
  a.k_scale = TensorView();
  a.v_scale = TensorView();
  decode_attention(a);
  EXPECT_NE(std::memcmp(out.data(), ref.data(), static_cast<size_t>(ref.nbytes())), 0);
}

TEST(AttentionFp8Cache, BindRejectsScalesWithoutFp8) {
  Attention attn(4, 8, 0.0f, 2);
  Tensor fc = Tensor::empty({2, 4, 2, 8}, DType::kF32), s = Tensor::empty({2}, DType::kF32);
  try {
    attn.bind_cache(fc.view(), fc.view(), s.view(), s.view());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_scale/v_scale apply to float8_e4m3 caches only"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvattn
