// Every bad-input path of the op entries (DESIGN §4): each throws kvattn::Error whose message
// names the argument and gives the expected and the actual value. Each test starts from a
// valid call (checked to pass) and breaks exactly one thing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Runs stmt; expects a kvattn::Error whose message matches `matcher`; returns the message.
template <typename Fn, typename M>
std::string expect_error(Fn&& fn, const M& matcher) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), matcher);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-kvattn exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no kvattn::Error was thrown";
  return {};
}

#define EXPECT_KVATTN_ERROR(stmt, ...)                 \
  do {                                                 \
    SCOPED_TRACE(#stmt);                               \
    expect_error([&] { stmt; }, AllOf(__VA_ARGS__));   \
  } while (0)

// A view of the same memory with other shape/strides/dtype/device.
TensorView with(const TensorView& t, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  TensorView v(t.data, t.dtype, t.device, shape, strides);
  return v;
}
TensorView on(const TensorView& t, Device d) {
  TensorView v = t;
  v.device = d;
  return v;
}
TensorView as(const TensorView& t, DType dt) {
  TensorView v = t;
  v.dtype = dt;
  return v;
}

// ---------------- store_kv ----------------

struct StoreFixture : ::testing::Test {
  // key/value [8, 2, 64]; caches [4, 16, 2, 64]; all f32, every buffer big enough for the
  // re-shaped views below.
  Tensor key = Tensor::zeros({8, 2, 128}, DType::kF32);
  Tensor value = Tensor::zeros({8, 2, 128}, DType::kF32);
  Tensor kc = Tensor::zeros({4, 16, 2, 128}, DType::kF32);
  Tensor vc = Tensor::zeros({4, 16, 2, 128}, DType::kF32);
  Tensor slots = test::int_tensor({0, 1, 2, -1, 17, 33, 63, 5});
  TensorView k, v, k_cache, v_cache;

  void SetUp() override {
    k = with(key, {8, 2, 64}, {256, 64, 1});  // token stride 256 > 2*64: a strided view
    v = with(value, {8, 2, 64}, {256, 64, 1});
    k_cache = with(kc, {4, 16, 2, 64}, {16 * 2 * 64, 128, 64, 1});
    v_cache = with(vc, {4, 16, 2, 64}, {16 * 2 * 64, 128, 64, 1});
    ASSERT_NO_THROW(store_kv(k, v, k_cache, v_cache, slots));
  }
  void call(const TensorView& k_, const TensorView& v_, const TensorView& kc_,
            const TensorView& vc_, const TensorView& s_) {
    store_kv(k_, v_, kc_, vc_, s_);
  }
};

TEST_F(StoreFixture, WrongRank) {
  EXPECT_KVATTN_ERROR(call(with(key, {8, 128}, {256, 1}), v, k_cache, v_cache, slots),
                      HasSubstr("store_kv"), HasSubstr("key"), HasSubstr("rank"));
  EXPECT_KVATTN_ERROR(call(k, with(value, {8, 2, 4, 16}, {256, 64, 16, 1}), k_cache, v_cache,
                           slots),
                      HasSubstr("value"), HasSubstr("rank"));
  EXPECT_KVATTN_ERROR(call(k, v, with(kc, {64, 2, 64}, {128, 64, 1}), v_cache, slots),
                      HasSubstr("k_cache"), HasSubstr("rank 4"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, with(vc, {64, 2, 64}, {128, 64, 1}), slots),
                      HasSubstr("v_cache"), HasSubstr("rank"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, with(slots, {2, 4}, {4, 1})),
                      HasSubstr("slot_mapping"), HasSubstr("rank"));
}

TEST_F(StoreFixture, MismatchedShapes) {
  // The DESIGN example, word for word.
  EXPECT_KVATTN_ERROR(call(k, v, with(kc, {4, 16, 2, 128}, {4096, 256, 128, 1}),
                           with(vc, {4, 16, 2, 128}, {4096, 256, 128, 1}), slots),
                      HasSubstr("store_kv: k_cache head_dim is 128 but key head_dim is 64"));
  EXPECT_KVATTN_ERROR(call(k, v, with(kc, {4, 16, 4, 64}, {4096, 256, 64, 1}),
                           with(vc, {4, 16, 4, 64}, {4096, 256, 64, 1}), slots),
                      HasSubstr("k_cache"), HasSubstr("num_kv_heads"), HasSubstr("4"),
                      HasSubstr("2"));
  EXPECT_KVATTN_ERROR(call(k, with(value, {8, 1, 64}, {128, 64, 1}), k_cache, v_cache, slots),
                      HasSubstr("value"), HasSubstr("[8, 1, 64]"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, with(vc, {3, 16, 2, 64}, {2048, 128, 64, 1}), slots),
                      HasSubstr("v_cache"), HasSubstr("[3, 16, 2, 64]"),
                      HasSubstr("[4, 16, 2, 64]"));
  Tensor long_slots = test::int_tensor(std::vector<int64_t>(9, -1));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, long_slots), HasSubstr("slot_mapping"),
                      HasSubstr("9"), HasSubstr("8"));
}

TEST_F(StoreFixture, WrongDtype) {
  EXPECT_KVATTN_ERROR(call(as(k, DType::kI32), as(v, DType::kI32), as(k_cache, DType::kI32),
                           as(v_cache, DType::kI32), slots),
                      HasSubstr("key"), HasSubstr("dtype"), HasSubstr("int32"));
  EXPECT_KVATTN_ERROR(call(k, as(v, DType::kBF16), k_cache, v_cache, slots),
                      HasSubstr("value"), HasSubstr("dtype"), HasSubstr("float32"),
                      HasSubstr("bfloat16"));
  EXPECT_KVATTN_ERROR(call(k, v, as(k_cache, DType::kBF16), v_cache, slots),
                      HasSubstr("k_cache"), HasSubstr("dtype"), HasSubstr("bfloat16"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, as(v_cache, DType::kF16), slots),
                      HasSubstr("v_cache"), HasSubstr("float16"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, as(slots, DType::kF32)),
                      HasSubstr("slot_mapping"), HasSubstr("dtype"), HasSubstr("int32"),
                      HasSubstr("float32"));
}

TEST_F(StoreFixture, WrongDevice) {
  // Views that claim another device are rejected before any byte is touched.
  EXPECT_KVATTN_ERROR(call(k, v, on(k_cache, Device::cuda(0)), v_cache, slots),
                      HasSubstr("k_cache"), HasSubstr("cuda:0"), HasSubstr("cpu"));
  EXPECT_KVATTN_ERROR(call(k, on(v, Device::cuda(1)), k_cache, v_cache, slots),
                      HasSubstr("value"), HasSubstr("cuda:1"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, on(v_cache, Device::cuda(0)), slots),
                      HasSubstr("v_cache"), HasSubstr("cuda"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, on(slots, Device::cuda(0))),
                      HasSubstr("slot_mapping"), HasSubstr("cuda"));
#ifndef KVATTN_WITH_CUDA
  EXPECT_KVATTN_ERROR(call(on(k, Device::cuda(0)), on(v, Device::cuda(0)),
                           on(k_cache, Device::cuda(0)), on(v_cache, Device::cuda(0)),
                           on(slots, Device::cuda(0))),
                      HasSubstr("CUDA"));
#endif
}

TEST_F(StoreFixture, WrongStrides) {
  // head_dim not contiguous.
  EXPECT_KVATTN_ERROR(call(with(key, {8, 2, 64}, {256, 128, 2}), v, k_cache, v_cache, slots),
                      HasSubstr("key"), HasSubstr("stride(2)"));
  // head stride != head_dim (heads not packed).
  EXPECT_KVATTN_ERROR(call(k, with(value, {8, 2, 64}, {256, 128, 1}), k_cache, v_cache, slots),
                      HasSubstr("value"), HasSubstr("stride(1)"), HasSubstr("64"),
                      HasSubstr("128"));
  // Negative token stride.
  EXPECT_KVATTN_ERROR(call(with(key, {8, 2, 64}, {-128, 64, 1}), v, k_cache, v_cache, slots),
                      HasSubstr("key"), HasSubstr("stride"));
  // Cache not contiguous inside a block.
  EXPECT_KVATTN_ERROR(call(k, v, with(kc, {4, 16, 2, 64}, {4096, 256, 64, 1}), v_cache, slots),
                      HasSubstr("k_cache"), HasSubstr("stride(1)"));
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, with(vc, {4, 16, 2, 64}, {4096, 128, 128, 1}), slots),
                      HasSubstr("v_cache"), HasSubstr("stride"));
  // Block stride smaller than a block (blocks would overlap).
  EXPECT_KVATTN_ERROR(call(k, v, with(kc, {4, 16, 2, 64}, {1024, 128, 64, 1}), v_cache, slots),
                      HasSubstr("k_cache"), HasSubstr("block stride"), HasSubstr("2048"),
                      HasSubstr("1024"));
}

TEST_F(StoreFixture, SlotOutOfRange) {
  for (int64_t bad : {int64_t{64}, int64_t{65}, int64_t{1} << 31, int64_t{1} << 40}) {
    Tensor s = test::int_tensor({0, 1, bad, 3}, DType::kI64);
    EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, s), HasSubstr("slot_mapping"),
                        HasSubstr(std::to_string(bad)), HasSubstr("64"));
  }
  Tensor s32 = test::int_tensor({0, 64}, DType::kI32);
  EXPECT_KVATTN_ERROR(call(k, v, k_cache, v_cache, s32), HasSubstr("slot_mapping[1]"),
                      HasSubstr("64"));
}

// ---------------- prefill_attention ----------------

struct PrefillFixture : ::testing::Test {
  Tensor qt = Tensor::zeros({10, 4, 64}, DType::kF32);
  Tensor kt = Tensor::zeros({12, 2, 64}, DType::kF32);
  Tensor vt = Tensor::zeros({12, 2, 64}, DType::kF32);
  Tensor outt = Tensor::zeros({10, 4, 64}, DType::kF32);
  Tensor lset = Tensor::zeros({4, 10}, DType::kF32);
  Tensor cu_q = test::int_tensor({0, 4, 10});
  Tensor cu_k = test::int_tensor({0, 5, 12});
  // Paged form: caches [6, 4, 2, 64], table [2, 3].
  Tensor kc = Tensor::zeros({6, 4, 2, 64}, DType::kF32);
  Tensor vc = Tensor::zeros({6, 4, 2, 64}, DType::kF32);
  Tensor table = test::int_tensor_2d({3, 1, -1, 0, 5, 2}, 2, 3);
  PrefillArgs a, p;

  void SetUp() override {
    std::mt19937_64 rng(1);
    for (const Tensor* t : {&qt, &kt, &vt, &kc, &vc}) test::fill_uniform(t->view(), rng);
    a.q = qt;
    a.k = kt;
    a.v = vt;
    a.cu_seqlens_q = cu_q;
    a.cu_seqlens_k = cu_k;
    a.max_seqlen_q = 6;
    a.max_seqlen_k = 7;
    a.out = outt;
    a.lse = lset;
    ASSERT_NO_THROW(prefill_attention(a));
    p = a;
    p.k = kc;
    p.v = vc;
    p.block_table = table;
    ASSERT_NO_THROW(prefill_attention(p));  // keys 5 and 7 need 2 blocks each
  }
  template <typename F>
  PrefillArgs changed(const PrefillArgs& base, F f) {
    PrefillArgs x = base;
    f(x);
    return x;
  }
};

#define EXPECT_PREFILL_ERROR(base, change, ...) \
  EXPECT_KVATTN_ERROR(prefill_attention(changed(base, [&](PrefillArgs& x) { change; })), \
                      HasSubstr("prefill_attention"), __VA_ARGS__)

TEST_F(PrefillFixture, WrongRankAndMissingTensors) {
  EXPECT_PREFILL_ERROR(a, x.q = with(qt, {10, 256}, {256, 1}), HasSubstr("q"),
                       HasSubstr("rank 3"), HasSubstr("rank 2"));
  EXPECT_PREFILL_ERROR(a, x.k = with(kt, {12, 128}, {128, 1}), HasSubstr("k "),
                       HasSubstr("rank"));
  EXPECT_PREFILL_ERROR(a, x.out = with(outt, {10, 4, 8, 8}, {256, 64, 8, 1}), HasSubstr("out"),
                       HasSubstr("rank"));
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = with(cu_q, {1, 3}, {3, 1}),
                       HasSubstr("cu_seqlens_q"), HasSubstr("rank"));
  EXPECT_PREFILL_ERROR(a, x.q = TensorView(), HasSubstr("q"));
  EXPECT_PREFILL_ERROR(a, x.out = TensorView(), HasSubstr("out"));
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_k = TensorView(), HasSubstr("cu_seqlens_k"));
  EXPECT_PREFILL_ERROR(p, x.block_table = with(table, {6}, {1}), HasSubstr("block_table"),
                       HasSubstr("rank"));
}

TEST_F(PrefillFixture, MismatchedShapes) {
  EXPECT_PREFILL_ERROR(a, (x.k = with(kt, {12, 4, 32}, {128, 32, 1}),
                           x.v = with(vt, {12, 4, 32}, {128, 32, 1})),
                       HasSubstr("k head_dim is 32 but q head_dim is 64"));
  EXPECT_PREFILL_ERROR(p, (x.k = with(kc, {6, 4, 1, 128}, {512, 128, 128, 1}),
                           x.v = with(vc, {6, 4, 1, 128}, {512, 128, 128, 1})),
                       HasSubstr("k_cache head_dim is 128 but q head_dim is 64"));
  // Head ratio not an integer: 4 query heads over 3 KV heads.
  Tensor k3 = Tensor::zeros({12, 3, 64}, DType::kF32);
  Tensor v3 = Tensor::zeros({12, 3, 64}, DType::kF32);
  EXPECT_PREFILL_ERROR(a, (x.k = k3, x.v = v3), HasSubstr("num_heads"), HasSubstr("multiple"),
                       HasSubstr("4"), HasSubstr("3"));
  EXPECT_PREFILL_ERROR(a, x.v = with(vt, {11, 2, 64}, {128, 64, 1}), HasSubstr("v shape"),
                       HasSubstr("[11, 2, 64]"), HasSubstr("[12, 2, 64]"));
  EXPECT_PREFILL_ERROR(a, x.out = with(outt, {10, 2, 64}, {256, 64, 1}), HasSubstr("out"),
                       HasSubstr("[10, 2, 64]"), HasSubstr("[10, 4, 64]"));
  EXPECT_PREFILL_ERROR(p, x.v = with(vc, {5, 4, 2, 64}, {512, 128, 64, 1}),
                       HasSubstr("v_cache"), HasSubstr("[5, 4, 2, 64]"));
  Tensor table3 = test::int_tensor_2d({0, 1, 2}, 1, 3);
  EXPECT_PREFILL_ERROR(p, x.block_table = table3, HasSubstr("block_table"),
                       HasSubstr("num_seqs"), HasSubstr("2"), HasSubstr("1"));
}

TEST_F(PrefillFixture, WrongDtypeDeviceAndStride) {
  EXPECT_PREFILL_ERROR(a, x.out = as(outt, DType::kBF16), HasSubstr("out"), HasSubstr("dtype"),
                       HasSubstr("float32"), HasSubstr("bfloat16"));
  EXPECT_PREFILL_ERROR(a, x.k = as(kt, DType::kBF16), HasSubstr("k "), HasSubstr("dtype"));
  EXPECT_PREFILL_ERROR(a, (x.q = as(qt, DType::kI64), x.out = as(outt, DType::kI64)),
                       HasSubstr("q"), HasSubstr("int64"));
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = test::int_tensor({0, 4, 10}, DType::kI64),
                       HasSubstr("cu_seqlens_q"), HasSubstr("int32"), HasSubstr("int64"));
  EXPECT_PREFILL_ERROR(p, x.block_table = as(table, DType::kI64), HasSubstr("block_table"),
                       HasSubstr("int32"), HasSubstr("int64"));
  EXPECT_PREFILL_ERROR(p, x.k = as(kc, DType::kBF16), HasSubstr("k_cache"), HasSubstr("dtype"));
  EXPECT_PREFILL_ERROR(a, x.v = on(vt, Device::cuda(0)), HasSubstr("v "), HasSubstr("cuda:0"));
  EXPECT_PREFILL_ERROR(a, x.out = on(outt, Device::cuda(0)), HasSubstr("out"),
                       HasSubstr("cuda"));
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_k = on(cu_k, Device::cuda(0)),
                       HasSubstr("cu_seqlens_k"), HasSubstr("cuda"));
  EXPECT_PREFILL_ERROR(p, x.block_table = on(table, Device::cuda(0)), HasSubstr("block_table"),
                       HasSubstr("cuda"));
  EXPECT_PREFILL_ERROR(a, x.q = with(qt, {10, 4, 32}, {256, 64, 2}), HasSubstr("q"),
                       HasSubstr("stride(2)"));
  EXPECT_PREFILL_ERROR(a, x.k = with(kt, {6, 2, 64}, {128, 128, 1}), HasSubstr("k "),
                       HasSubstr("stride(1)"));
  EXPECT_PREFILL_ERROR(p, x.k = with(kc, {6, 4, 2, 32}, {512, 128, 64, 1}),
                       HasSubstr("k_cache"), HasSubstr("stride"));
  EXPECT_PREFILL_ERROR(p, x.block_table = with(table, {2, 2}, {3, 2}), HasSubstr("block_table"),
                       HasSubstr("stride"));
  Tensor cu_wide = test::int_tensor({0, 9, 4, 9, 10, 9});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = with(cu_wide, {3}, {2}),
                       HasSubstr("cu_seqlens_q"), HasSubstr("contiguous"));
}

TEST_F(PrefillFixture, BadCuSeqlens) {
  const auto cu = [](std::vector<int64_t> v) { return test::int_tensor(v); };
  Tensor not_monotonic = cu({0, 6, 4, 10}), k4 = cu({0, 5, 6, 12});
  EXPECT_PREFILL_ERROR(a, (x.cu_seqlens_q = not_monotonic, x.cu_seqlens_k = k4),
                       HasSubstr("cu_seqlens_q"), HasSubstr("non-decreasing"), HasSubstr("6"),
                       HasSubstr("4"));
  Tensor k_not_monotonic = cu({0, 7, 5, 12}), q4 = cu({0, 4, 4, 10});
  EXPECT_PREFILL_ERROR(a, (x.cu_seqlens_q = q4, x.cu_seqlens_k = k_not_monotonic),
                       HasSubstr("cu_seqlens_k"), HasSubstr("non-decreasing"));
  Tensor not_zero = cu({1, 4, 10});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = not_zero, HasSubstr("cu_seqlens_q[0]"),
                       HasSubstr("1"));
  Tensor k_not_zero = cu({2, 5, 12});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_k = k_not_zero, HasSubstr("cu_seqlens_k[0]"));
  Tensor short_q = cu({0, 4, 9});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = short_q, HasSubstr("cu_seqlens_q"), HasSubstr("10"),
                       HasSubstr("9"));
  Tensor long_q = cu({0, 4, 11});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_q = long_q, HasSubstr("cu_seqlens_q"), HasSubstr("10"),
                       HasSubstr("11"));
  Tensor long_k = cu({0, 5, 13});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_k = long_k, HasSubstr("cu_seqlens_k"), HasSubstr("12"),
                       HasSubstr("13"));
  Tensor three = cu({0, 5, 12, 12});
  EXPECT_PREFILL_ERROR(a, x.cu_seqlens_k = three, HasSubstr("cu_seqlens_k"), HasSubstr("3"),
                       HasSubstr("4"));
  Tensor empty = Tensor::empty({0}, DType::kI32);
  EXPECT_PREFILL_ERROR(a, (x.cu_seqlens_q = empty, x.cu_seqlens_k = empty),
                       HasSubstr("cu_seqlens_q"));
  // Paged: key lengths past the table's capacity (3 blocks of 4 = 12 keys).
  Tensor too_long = cu({0, 5, 18});
  EXPECT_PREFILL_ERROR(p, x.cu_seqlens_k = too_long, HasSubstr("block_table"),
                       HasSubstr("13"), HasSubstr("12"));
}

TEST_F(PrefillFixture, BlockIdOutOfRange) {
  for (int bad : {6, 7, 1 << 30, -1, -5}) {
    Tensor t = test::int_tensor_2d({3, 1, -1, 0, bad, 2}, 2, 3);  // seq 1 uses 2 blocks
    const std::string msg =
        expect_error([&] { prefill_attention(changed(p, [&](PrefillArgs& x) {
                             x.block_table = t;
                           })); },
                     AllOf(HasSubstr("block_table[1][1]"), HasSubstr(std::to_string(bad)),
                           HasSubstr("6")));
    SCOPED_TRACE(msg);
  }
  // Entries past a sequence's last block are never read, whatever they hold.
  Tensor t = test::int_tensor_2d({3, 1, 1 << 30, 0, 5, -7}, 2, 3);
  EXPECT_NO_THROW(prefill_attention(changed(p, [&](PrefillArgs& x) { x.block_table = t; })));
}

TEST_F(PrefillFixture, BadLseAndScale) {
  Tensor lse_short = Tensor::zeros({4, 9}, DType::kF32);
  EXPECT_PREFILL_ERROR(a, x.lse = lse_short, HasSubstr("lse"), HasSubstr("total_q"),
                       HasSubstr("10"), HasSubstr("9"));
  Tensor lse_t = Tensor::zeros({10, 4}, DType::kF32);
  EXPECT_PREFILL_ERROR(a, x.lse = lse_t, HasSubstr("lse"), HasSubstr("num_heads"));
  EXPECT_PREFILL_ERROR(a, x.lse = as(lset, DType::kBF16), HasSubstr("lse"), HasSubstr("dtype"),
                       HasSubstr("float32"));
  EXPECT_PREFILL_ERROR(a, x.lse = with(lset, {40}, {1}), HasSubstr("lse"), HasSubstr("rank"));
  Tensor lse_wide = Tensor::zeros({4, 20}, DType::kF32);
  EXPECT_PREFILL_ERROR(a, x.lse = with(lse_wide, {4, 10}, {20, 1}), HasSubstr("lse"),
                       HasSubstr("contiguous"));
  EXPECT_PREFILL_ERROR(a, x.lse = on(lset, Device::cuda(0)), HasSubstr("lse"),
                       HasSubstr("cuda"));
  EXPECT_PREFILL_ERROR(a, x.softmax_scale = -1.0f, HasSubstr("softmax_scale"));
  EXPECT_PREFILL_ERROR(a, x.softmax_scale = std::nanf(""), HasSubstr("softmax_scale"));
  EXPECT_PREFILL_ERROR(a, x.softmax_scale = std::numeric_limits<float>::infinity(),
                       HasSubstr("softmax_scale"));
}

// window_size and softcap (flash-attn's meanings): out-of-range values name the argument
// and give the value, on every device; CUDA prefill implements both (issue 18).
TEST_F(PrefillFixture, BadWindowAndSoftcap) {
  for (const PrefillArgs& base : {a, p}) {
    EXPECT_PREFILL_ERROR(base, x.window_left = -2, HasSubstr("window_size left"),
                         HasSubstr(">= -1"), HasSubstr("-2"));
    EXPECT_PREFILL_ERROR(base, x.window_right = -7, HasSubstr("window_size right"),
                         HasSubstr(">= -1"), HasSubstr("-7"));
    EXPECT_PREFILL_ERROR(base, x.softcap = -0.5f, HasSubstr("softcap"), HasSubstr(">= 0"),
                         HasSubstr("-0.5"));
    EXPECT_PREFILL_ERROR(base, x.softcap = std::nanf(""), HasSubstr("softcap"),
                         HasSubstr("finite"));
    EXPECT_PREFILL_ERROR(base, x.softcap = std::numeric_limits<float>::infinity(),
                         HasSubstr("softcap"), HasSubstr("finite"));
  }
  PrefillArgs ok = a;
  ok.window_left = 0;
  ok.window_right = 3;
  ok.softcap = 20.0f;
  EXPECT_NO_THROW(prefill_attention(ok));
}

TEST_F(PrefillFixture, WindowAndSoftcapCheckedOnCuda) {
  const Device gpu = Device::cuda(0);
  PrefillArgs g = a;
  // Views relabelled as bf16 on cuda:0: nothing is read before the option checks.
  for (TensorView* t : {&g.q, &g.k, &g.v, &g.out}) *t = as(on(*t, gpu), DType::kBF16);
  for (TensorView* t : {&g.lse, &g.cu_seqlens_q, &g.cu_seqlens_k}) *t = on(*t, gpu);
  EXPECT_PREFILL_ERROR(g, x.window_left = -2, HasSubstr("window_size left"), HasSubstr("-2"));
  EXPECT_PREFILL_ERROR(g, x.softcap = -1.0f, HasSubstr("softcap"), HasSubstr(">= 0"));
#ifndef KVATTN_WITH_CUDA
  // Valid options pass the checks and reach the (missing) CUDA backend.
  EXPECT_PREFILL_ERROR(g, x.window_left = 4, HasSubstr("no CUDA backend"));
  EXPECT_PREFILL_ERROR(g, x.window_right = 0; x.causal = false, HasSubstr("no CUDA backend"));
  EXPECT_PREFILL_ERROR(g, x.softcap = 30.0f, HasSubstr("no CUDA backend"));
#endif
}

// alibi_slopes: float32 [num_heads] or [num_seqs, num_heads], finite; refused on CUDA.
TEST_F(PrefillFixture, BadAlibiSlopes) {
  const int64_t heads = a.q.size(1), seqs = a.cu_seqlens_q.size(0) - 1;
  Tensor per_head = Tensor::zeros({heads}, DType::kF32);
  Tensor per_seq = Tensor::zeros({seqs, heads}, DType::kF32);
  for (const PrefillArgs& base : {a, p}) {
    for (const Tensor* ok : {&per_head, &per_seq}) {
      PrefillArgs x = base;
      x.alibi_slopes = *ok;
      EXPECT_NO_THROW(prefill_attention(x));
    }
    Tensor short_heads = Tensor::zeros({heads - 1}, DType::kF32);
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = short_heads, HasSubstr("alibi_slopes"),
                         HasSubstr("num_heads"), HasSubstr(std::to_string(heads)),
                         HasSubstr(std::to_string(heads - 1)));
    Tensor wrong_seqs = Tensor::zeros({seqs + 1, heads}, DType::kF32);
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = wrong_seqs, HasSubstr("alibi_slopes"),
                         HasSubstr("num_seqs"), HasSubstr(std::to_string(seqs)));
    Tensor rank3 = Tensor::zeros({1, seqs, heads}, DType::kF32);
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = rank3, HasSubstr("alibi_slopes"),
                         HasSubstr("[num_heads] or [num_seqs, num_heads]"));
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = as(per_head, DType::kBF16),
                         HasSubstr("alibi_slopes"), HasSubstr("float32"), HasSubstr("bfloat16"));
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = with(per_seq, {seqs, heads / 2}, {heads, 2}),
                         HasSubstr("alibi_slopes"));
    Tensor nan = Tensor::zeros({seqs, heads}, DType::kF32);
    nan.ptr<float>()[heads + 1] = std::nanf("");
    EXPECT_PREFILL_ERROR(base, x.alibi_slopes = nan, HasSubstr("alibi_slopes[1][1]"),
                         HasSubstr("finite"));
  }
  const Device gpu = Device::cuda(0);
  PrefillArgs g = a;
  for (TensorView* t : {&g.q, &g.k, &g.v, &g.out}) *t = as(on(*t, gpu), DType::kBF16);
  for (TensorView* t : {&g.lse, &g.cu_seqlens_q, &g.cu_seqlens_k}) *t = on(*t, gpu);
  // CUDA prefill takes alibi_slopes (issue 18): shape, dtype and device are checked, the
  // values (on the device) are not read.
  const Tensor too_few = Tensor::zeros({heads - 1}, DType::kF32);
  EXPECT_PREFILL_ERROR(g, x.alibi_slopes = on(too_few, gpu),
                       HasSubstr("alibi_slopes"), HasSubstr("num_heads"));
  EXPECT_PREFILL_ERROR(g, x.alibi_slopes = per_head, HasSubstr("alibi_slopes"),
                       HasSubstr("cpu"));
#ifndef KVATTN_WITH_CUDA
  EXPECT_PREFILL_ERROR(g, x.alibi_slopes = on(per_seq, gpu), HasSubstr("no CUDA backend"));
#endif
}

// ---------------- decode_attention ----------------

struct DecodeFixture : ::testing::Test {
  // 3 sequences, q_len 1, 8 query heads over 2 KV heads; caches [6, 16, 2, 64]; table [3, 2].
  Tensor qt = Tensor::zeros({3, 8, 64}, DType::kF32);
  Tensor outt = Tensor::zeros({3, 8, 64}, DType::kF32);
  Tensor lset = Tensor::zeros({8, 3}, DType::kF32);
  Tensor kc = Tensor::zeros({6, 16, 2, 64}, DType::kF32);
  Tensor vc = Tensor::zeros({6, 16, 2, 64}, DType::kF32);
  Tensor table = test::int_tensor_2d({4, -1, 0, 2, -1, -1}, 3, 2);
  Tensor lens = test::int_tensor({5, 20, 0});
  DecodeArgs a;

  void SetUp() override {
    std::mt19937_64 rng(2);
    for (const Tensor* t : {&qt, &kc, &vc}) test::fill_uniform(t->view(), rng);
    a.q = qt;
    a.k_cache = kc;
    a.v_cache = vc;
    a.block_table = table;
    a.cache_seqlens = lens;
    a.out = outt;
    a.lse = lset;
    ASSERT_NO_THROW(decode_attention(a));
  }
  template <typename F>
  DecodeArgs changed(F f) {
    DecodeArgs x = a;
    f(x);
    return x;
  }
};

#define EXPECT_DECODE_ERROR(change, ...) \
  EXPECT_KVATTN_ERROR(decode_attention(changed([&](DecodeArgs& x) { change; })), \
                      HasSubstr("decode_attention"), __VA_ARGS__)

TEST_F(DecodeFixture, CacheSeqlensOutOfRange) {
  Tensor too_long = test::int_tensor({5, 33, 0});  // the table holds 2 blocks of 16
  EXPECT_DECODE_ERROR(x.cache_seqlens = too_long, HasSubstr("cache_seqlens"), HasSubstr("33"),
                      HasSubstr("32"));
  Tensor negative = test::int_tensor({5, -1, 0});
  EXPECT_DECODE_ERROR(x.cache_seqlens = negative, HasSubstr("cache_seqlens[1]"),
                      HasSubstr("-1"));
  Tensor i64 = test::int_tensor({5, 20, 0}, DType::kI64);
  EXPECT_DECODE_ERROR(x.cache_seqlens = i64, HasSubstr("cache_seqlens"), HasSubstr("int32"),
                      HasSubstr("int64"));
  EXPECT_DECODE_ERROR(x.cache_seqlens = with(lens, {1, 3}, {3, 1}), HasSubstr("cache_seqlens"),
                      HasSubstr("rank"));
  EXPECT_DECODE_ERROR(x.cache_seqlens = on(lens, Device::cuda(0)), HasSubstr("cache_seqlens"),
                      HasSubstr("cuda"));
  Tensor two = test::int_tensor({5, 20});
  EXPECT_DECODE_ERROR(x.cache_seqlens = two, HasSubstr("q"), HasSubstr("3"), HasSubstr("2"));
}

TEST_F(DecodeFixture, BlockIdOutOfRange) {
  for (int bad : {6, 100, -1}) {
    Tensor t = test::int_tensor_2d({4, -1, 0, bad, -1, -1}, 3, 2);  // seq 1 uses 2 blocks
    EXPECT_DECODE_ERROR(x.block_table = t, HasSubstr("block_table[1][1]"),
                        HasSubstr(std::to_string(bad)), HasSubstr("6"));
  }
  Tensor t = test::int_tensor_2d({4, 99, 0, 2, -3, 1 << 30}, 3, 2);  // unused entries
  EXPECT_NO_THROW(decode_attention(changed([&](DecodeArgs& x) { x.block_table = t; })));
}

TEST_F(DecodeFixture, WrongShapesDtypesDevicesStrides) {
  EXPECT_DECODE_ERROR(x.q_len = 0, HasSubstr("q_len"), HasSubstr("0"));
  EXPECT_DECODE_ERROR(x.q_len = 2, HasSubstr("q"), HasSubstr("q_len"), HasSubstr("6"));
  EXPECT_DECODE_ERROR((x.k_cache = with(kc, {6, 16, 1, 128}, {2048, 128, 128, 1}),
                       x.v_cache = with(vc, {6, 16, 1, 128}, {2048, 128, 128, 1})),
                      HasSubstr("k_cache head_dim is 128 but q head_dim is 64"));
  Tensor kc3 = Tensor::zeros({6, 16, 3, 64}, DType::kF32);
  Tensor vc3 = Tensor::zeros({6, 16, 3, 64}, DType::kF32);
  EXPECT_DECODE_ERROR((x.k_cache = kc3, x.v_cache = vc3), HasSubstr("num_heads"),
                      HasSubstr("multiple"), HasSubstr("8"), HasSubstr("3"));
  EXPECT_DECODE_ERROR(x.v_cache = with(vc, {5, 16, 2, 64}, {2048, 128, 64, 1}),
                      HasSubstr("v_cache"), HasSubstr("[5, 16, 2, 64]"));
  EXPECT_DECODE_ERROR(x.k_cache = with(kc, {6, 16, 2, 64}, {2048, 256, 64, 1}),
                      HasSubstr("k_cache"), HasSubstr("stride(1)"));
  EXPECT_DECODE_ERROR(x.k_cache = with(kc, {6, 16 * 2 * 64}, {2048, 1}), HasSubstr("k_cache"),
                      HasSubstr("rank"));
  EXPECT_DECODE_ERROR(x.k_cache = as(kc, DType::kBF16), HasSubstr("k_cache"),
                      HasSubstr("dtype"), HasSubstr("bfloat16"));
  EXPECT_DECODE_ERROR(x.v_cache = on(vc, Device::cuda(0)), HasSubstr("v_cache"),
                      HasSubstr("cuda"));
  EXPECT_DECODE_ERROR(x.out = as(outt, DType::kBF16), HasSubstr("out"), HasSubstr("dtype"));
  EXPECT_DECODE_ERROR(x.out = with(outt, {3, 8, 32}, {512, 32, 1}), HasSubstr("out"),
                      HasSubstr("[3, 8, 32]"));
  EXPECT_DECODE_ERROR(x.q = with(qt, {3, 8, 64}, {512, 64, 2}), HasSubstr("q"),
                      HasSubstr("stride"));
  Tensor lse_bad = Tensor::zeros({8, 4}, DType::kF32);
  EXPECT_DECODE_ERROR(x.lse = lse_bad, HasSubstr("lse"), HasSubstr("3"), HasSubstr("4"));
  Tensor table4 = test::int_tensor_2d({0, 1, 2, 3}, 4, 1);
  EXPECT_DECODE_ERROR(x.block_table = table4, HasSubstr("block_table"), HasSubstr("num_seqs"),
                      HasSubstr("3"), HasSubstr("4"));
  EXPECT_DECODE_ERROR(x.block_table = as(table, DType::kI64), HasSubstr("block_table"),
                      HasSubstr("int32"));
  EXPECT_DECODE_ERROR(x.block_table = TensorView(), HasSubstr("block_table"));
  EXPECT_DECODE_ERROR(x.softmax_scale = -0.5f, HasSubstr("softmax_scale"));
}

TEST_F(DecodeFixture, BadWindowAndSoftcap) {
  EXPECT_DECODE_ERROR(x.window_left = -3, HasSubstr("window_size left"), HasSubstr("-3"));
  EXPECT_DECODE_ERROR(x.window_right = -2, HasSubstr("window_size right"), HasSubstr("-2"));
  EXPECT_DECODE_ERROR(x.softcap = -1.0f, HasSubstr("softcap"), HasSubstr(">= 0"));
  EXPECT_DECODE_ERROR(x.softcap = std::nanf(""), HasSubstr("softcap"), HasSubstr("finite"));
  DecodeArgs g = a;
  for (TensorView* t : {&g.q, &g.k_cache, &g.v_cache, &g.out}) {
    *t = as(on(*t, Device::cuda(0)), DType::kBF16);
  }
  for (TensorView* t : {&g.block_table, &g.cache_seqlens, &g.lse}) *t = on(*t, Device::cuda(0));
  const auto on_gpu = [&](auto change) {
    DecodeArgs x = g;
    change(x);
    decode_attention(x);
  };
  // CUDA decode takes window and softcap (issue 18): bad values are still refused there.
  EXPECT_KVATTN_ERROR(on_gpu([](DecodeArgs& x) { x.window_left = -2; }),
                      HasSubstr("decode_attention"), HasSubstr("window_size left"),
                      HasSubstr("-2"));
  EXPECT_KVATTN_ERROR(on_gpu([](DecodeArgs& x) { x.softcap = -1.0f; }),
                      HasSubstr("decode_attention"), HasSubstr("softcap"), HasSubstr(">= 0"));
#ifndef KVATTN_WITH_CUDA
  // Valid options pass the checks and reach the (missing) CUDA backend.
  EXPECT_KVATTN_ERROR(on_gpu([](DecodeArgs& x) { x.window_left = 4096; }),
                      HasSubstr("no CUDA backend"));
  EXPECT_KVATTN_ERROR(on_gpu([](DecodeArgs& x) { x.window_right = 0; x.causal = false; }),
                      HasSubstr("no CUDA backend"));
  EXPECT_KVATTN_ERROR(on_gpu([](DecodeArgs& x) { x.softcap = 50.0f; }),
                      HasSubstr("no CUDA backend"));
#endif
}

// alibi_slopes and cache_leftpad on decode: shapes, dtypes, values; on CUDA both are checked
// (shape, dtype, device; values not read on the host).
TEST_F(DecodeFixture, BadAlibiAndLeftpad) {
  Tensor slopes = Tensor::zeros({3, 8}, DType::kF32);
  Tensor pad = test::int_tensor({5, 3, 0});
  EXPECT_NO_THROW(decode_attention(changed([&](DecodeArgs& x) {
    x.alibi_slopes = slopes;
    x.cache_leftpad = pad;
  })));
  Tensor slopes7 = Tensor::zeros({7}, DType::kF32);
  EXPECT_DECODE_ERROR(x.alibi_slopes = slopes7, HasSubstr("alibi_slopes"),
                      HasSubstr("num_heads"), HasSubstr("8"), HasSubstr("7"));
  Tensor inf = Tensor::zeros({8}, DType::kF32);
  inf.ptr<float>()[2] = std::numeric_limits<float>::infinity();
  EXPECT_DECODE_ERROR(x.alibi_slopes = inf, HasSubstr("alibi_slopes[2]"), HasSubstr("finite"));
  Tensor too_far = test::int_tensor({6, 3, 0});  // cache_seqlens[0] is 5
  EXPECT_DECODE_ERROR(x.cache_leftpad = too_far, HasSubstr("cache_leftpad[0]"),
                      HasSubstr("[0, cache_seqlens[0] = 5]"), HasSubstr("6"));
  Tensor negative = test::int_tensor({0, -1, 0});
  EXPECT_DECODE_ERROR(x.cache_leftpad = negative, HasSubstr("cache_leftpad[1]"),
                      HasSubstr("-1"));
  Tensor two = test::int_tensor({0, 0});
  EXPECT_DECODE_ERROR(x.cache_leftpad = two, HasSubstr("cache_leftpad"), HasSubstr("num_seqs"),
                      HasSubstr("3"), HasSubstr("2"));
  Tensor i64 = test::int_tensor({0, 0, 0}, DType::kI64);
  EXPECT_DECODE_ERROR(x.cache_leftpad = i64, HasSubstr("cache_leftpad"), HasSubstr("int32"));
  DecodeArgs g = a;
  for (TensorView* t : {&g.q, &g.k_cache, &g.v_cache, &g.out}) {
    *t = as(on(*t, Device::cuda(0)), DType::kBF16);
  }
  for (TensorView* t : {&g.block_table, &g.cache_seqlens, &g.lse}) *t = on(*t, Device::cuda(0));
  const auto on_gpu = [&](auto change) {
    DecodeArgs x = g;
    change(x);
    decode_attention(x);
  };
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.alibi_slopes = on(slopes7, Device::cuda(0)); }),
                      HasSubstr("decode_attention"), HasSubstr("alibi_slopes"),
                      HasSubstr("num_heads"));
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.alibi_slopes = slopes; }),
                      HasSubstr("decode_attention"), HasSubstr("alibi_slopes"), HasSubstr("cpu"));
#ifndef KVATTN_WITH_CUDA
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.alibi_slopes = on(slopes, Device::cuda(0)); }),
                      HasSubstr("no CUDA backend"));
#endif
  // cache_leftpad on CUDA: shape, dtype and device checked; its values are not read on the host
  // (the kernel clamps a bad one and records kFaultLeftpadOutOfRange: decode_gpu_test).
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.cache_leftpad = pad; }),
                      HasSubstr("decode_attention"), HasSubstr("cache_leftpad"), HasSubstr("cpu"));
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.cache_leftpad = on(two, Device::cuda(0)); }),
                      HasSubstr("decode_attention"), HasSubstr("cache_leftpad"),
                      HasSubstr("num_seqs"));
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.cache_leftpad = on(i64, Device::cuda(0)); }),
                      HasSubstr("decode_attention"), HasSubstr("cache_leftpad"),
                      HasSubstr("int32"));
#ifndef KVATTN_WITH_CUDA
  EXPECT_KVATTN_ERROR(on_gpu([&](DecodeArgs& x) { x.cache_leftpad = on(too_far, Device::cuda(0)); }),
                      HasSubstr("no CUDA backend"));
#endif
}

TEST(PlanDecode, RejectsBadSizes) {
  EXPECT_KVATTN_ERROR((void)plan_decode(4, 6, 4, 64, 1, 100, Device::cpu()),
                      HasSubstr("plan_decode"), HasSubstr("multiple"), HasSubstr("6"),
                      HasSubstr("4"));
  EXPECT_KVATTN_ERROR((void)plan_decode(4, 8, 2, 64, 0, 100, Device::cpu()),
                      HasSubstr("plan_decode"), HasSubstr("q_len"));
  EXPECT_KVATTN_ERROR((void)plan_decode(4, 8, 2, 0, 1, 100, Device::cpu()),
                      HasSubstr("plan_decode"), HasSubstr("head_dim"));
}

}  // namespace
}  // namespace kvattn
