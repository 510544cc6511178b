// float8_e4m3 KV caches on the CPU backend:
//  - store_kv quantises bit-exactly like the scalar encoder (quantize_e4m3 with the scale of
//    each KV head), skips negative slots, touches nothing else; NaN/Inf/huge inputs follow
//    fp8.h (NaN kept, saturation to +-448);
//  - decode and paged prefill over an fp8 cache match the float64 reference run on the
//    dequantised STORED bytes (e4m3(code) * scale), so the kernel is checked exactly as it
//    computes (adversarial shapes: pages 1/16/odd, GQA 1..8, empty rows, q_len > 1);
//  - the end-to-end error of fp8 against a bf16 cache on random data is printed;
//  - bad scales, and fp8 caches on CUDA for float32 inputs, are rejected with messages
//    naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "kvattn/core/fp8.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"
#include "support/case_util.h"
#include "support/paged_case.h"

namespace kvattn {
namespace {

using test::uniform_int;

Tensor random_scales(std::mt19937_64& rng, int64_t n, float lo = 0.02f, float hi = 3.0f) {
  Tensor s = Tensor::empty({n}, DType::kF32);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) s.ptr<float>()[i] = u(rng);
  return s;
}

// A float32 copy [num_blocks, block_size, Hkv, D] (contiguous) of an fp8 cache, dequantised
// exactly as the kernel reads it: e4m3_to_float(code) * scale[h] in float32.
Tensor dequantised(const TensorView& c, const Tensor& scale) {
  Tensor out = Tensor::empty({c.size(0), c.size(1), c.size(2), c.size(3)}, DType::kF32);
  float* o = out.ptr<float>();
  const auto* bytes = c.ptr<const uint8_t>();
  for (int64_t b = 0; b < c.size(0); ++b) {
    for (int64_t t = 0; t < c.size(1); ++t) {
      for (int64_t h = 0; h < c.size(2); ++h) {
        for (int64_t x = 0; x < c.size(3); ++x) {
          const uint8_t code = bytes[b * c.stride(0) + t * c.stride(1) + h * c.stride(2) + x];
          *o++ = e4m3_to_float(code) * scale.ptr<const float>()[h];
        }
      }
    }
  }
  return out;
}

// ---- store_kv ----

TEST(Fp8KvCache, StoreKvQuantisesBitExactlyLikeTheScalarEncoder) {
  for (int c = 0; c < test::case_count(60, 12); ++c) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = test::pick(rng, std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16});
    const int64_t hkv = uniform_int(rng, 1, 4), d = test::pick(rng, std::vector<int64_t>{8, 64, 40});
    const int64_t bs = test::pick(rng, std::vector<int64_t>{1, 16, 7}), nb = uniform_int(rng, 1, 6);
    const int64_t tokens = uniform_int(rng, 1, 40), n = uniform_int(rng, 0, tokens);
    SCOPED_TRACE(test::case_note(c, seed, std::string(dtype_name(dt))));
    test::RowBuffer key = test::make_rows(tokens, hkv, d, dt, uniform_int(rng, 0, 9));
    test::RowBuffer value = test::make_rows(tokens, hkv, d, dt, uniform_int(rng, 0, 9));
    // Wide values, so small scales saturate; then a few NaN and +-Inf entries.
    test::fill_random(key.view, rng, -600.0f, 600.0f);
    test::fill_random(value.view, rng, -3.0f, 3.0f);
    Tensor k_scale = random_scales(rng, hkv, 0.05f, 4.0f);
    Tensor v_scale = random_scales(rng, hkv, 0.001f, 1.0f);
    if (dt == DType::kF32) {
      float* k0 = key.view.ptr<float>();
      k0[0] = std::numeric_limits<float>::quiet_NaN();
      k0[d - 1] = std::numeric_limits<float>::infinity();
      k0[d / 2] = -std::numeric_limits<float>::infinity();
      k0[1] = -0.0f;
    }
    Tensor kc = Tensor::empty({nb, bs, hkv, d}, DType::kF8E4M3);
    Tensor vc = Tensor::empty({nb, bs, hkv, d}, DType::kF8E4M3);
    std::memset(kc.data(), 0xA5, static_cast<size_t>(kc.nbytes()));
    std::memset(vc.data(), 0xA5, static_cast<size_t>(vc.nbytes()));
    // Distinct slots, some negative (skipped).
    std::vector<int64_t> all(nb * bs);
    for (int64_t i = 0; i < nb * bs; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < n; ++i) {
      slots.push_back(i < nb * bs && uniform_int(rng, 0, 4) != 0 ? all[i] : -1);
    }
    Tensor sm = test::int_tensor(slots, uniform_int(rng, 0, 1) ? DType::kI32 : DType::kI64);
    // Expected bytes, from the scalar encoder.
    std::vector<uint8_t> ek(kc.nbytes(), 0xA5), ev(vc.nbytes(), 0xA5);
    for (int64_t i = 0; i < n; ++i) {
      if (slots[i] < 0) continue;
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t x = 0; x < d; ++x) {
          const int64_t src = i * key.view.stride(0) + h * d + x;
          const int64_t vsrc = i * value.view.stride(0) + h * d + x;
          const int64_t dst = (slots[i] * hkv + h) * d + x;
          ek[dst] = quantize_e4m3(static_cast<float>(test::element(
                                      TensorView(key.view.data, dt, Device::cpu(), {1 << 30}), src)),
                                  k_scale.ptr<float>()[h]);
          ev[dst] = quantize_e4m3(static_cast<float>(test::element(
                                      TensorView(value.view.data, dt, Device::cpu(), {1 << 30}), vsrc)),
                                  v_scale.ptr<float>()[h]);
        }
      }
    }
    store_kv(key.view, value.view, kc.view(), vc.view(), sm.view(), k_scale.view(),
             v_scale.view());
    EXPECT_EQ(std::memcmp(ek.data(), kc.data(), ek.size()), 0) << "k_cache bytes differ";
    EXPECT_EQ(std::memcmp(ev.data(), vc.data(), ev.size()), 0) << "v_cache bytes differ";
    if (dt == DType::kF32 && n > 0 && slots[0] >= 0) {
      const uint8_t* row = kc.ptr<uint8_t>() + slots[0] * hkv * d;
      EXPECT_EQ(row[0], 0x7f) << "NaN must stay NaN";
      EXPECT_EQ(row[d - 1], 0x7e) << "+Inf must saturate to +448";
      EXPECT_EQ(row[d / 2], 0xfe) << "-Inf must saturate to -448";
      EXPECT_EQ(row[1], 0x80) << "-0 must stay -0";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Fp8KvCache, StoreKvWithoutScalesUsesOne) {
  Tensor key = Tensor::empty({1, 1, 4}, DType::kF32), value = Tensor::empty({1, 1, 4}, DType::kF32);
  const float kv[4] = {1.0f, -2.5f, 500.0f, 0.0625f};
  std::memcpy(key.data(), kv, sizeof kv);
  std::memcpy(value.data(), kv, sizeof kv);
  Tensor kc = Tensor::empty({1, 2, 1, 4}, DType::kF8E4M3), vc = Tensor::empty({1, 2, 1, 4}, DType::kF8E4M3);
  Tensor sm = test::int_tensor({1});
  store_kv(key.view(), value.view(), kc.view(), vc.view(), sm.view());
  const uint8_t* row = kc.ptr<uint8_t>() + 4;
  EXPECT_EQ(row[0], 0x38);
  EXPECT_EQ(row[1], float_to_e4m3(-2.5f));
  EXPECT_EQ(row[2], 0x7e);
  EXPECT_EQ(row[3], float_to_e4m3(0.0625f));
}

// ---- decode and paged prefill against the reference on the stored bytes ----

struct Fp8Case {
  test::PagedKv kv;
  Tensor k_scale, v_scale, k_deq, v_deq;
  TensorView k_ref, v_ref;  // the dequantised caches, same block ids as kv
};

Fp8Case make_fp8_case(std::mt19937_64& rng, int64_t hkv, int64_t d, int64_t bs,
                      const std::vector<int64_t>& lens) {
  Fp8Case c;
  c.kv = test::make_paged_kv(rng, DType::kF8E4M3, hkv, d, bs, lens, -1.0f, 1.0f);
  c.k_scale = random_scales(rng, hkv);
  c.v_scale = random_scales(rng, hkv);
  c.k_deq = dequantised(c.kv.k_cache, c.k_scale);
  c.v_deq = dequantised(c.kv.v_cache, c.v_scale);
  return c;
}

std::vector<int64_t> draw_lens(std::mt19937_64& rng, int64_t batch, int64_t min_len) {
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = test::pick(rng, std::vector<int64_t>{1, 54, 97, uniform_int(rng, 1, 300)});
    len = std::max(len, min_len);
    if (uniform_int(rng, 0, 6) == 0) len = 0;  // empty row (padding)
    lens.push_back(len);
  }
  return lens;
}

// The score modifiers of a case: causal, window, softcap (RefMask's) and ALiBi (the slopes as
// a float32 [num_heads] tensor beside RefMask's copy).
struct Fp8Mods {
  bool causal = true;
  test::RefMask mask;
  Tensor slopes;
};

// The fields DecodeArgs and PrefillArgs share: fc's scales and block table, the modifiers,
// the outputs.
template <typename Args>
void set_shared_args(Args& a, const Fp8Case& fc, const Fp8Mods& mods, const TensorView& out,
                     const TensorView& lse) {
  a.k_scale = fc.k_scale.view();
  a.v_scale = fc.v_scale.view();
  a.block_table = fc.kv.block_table;
  a.causal = mods.causal;
  a.window_left = mods.mask.window_left;
  a.window_right = mods.mask.window_right;
  a.softcap = static_cast<float>(mods.mask.softcap);
  if (mods.slopes.defined()) a.alibi_slopes = mods.slopes.view();
  a.out = out;
  a.lse = lse;
}

// decode_attention over fc's fp8 caches (q_len query rows a sequence, lens keys) into out /
// lse, and the float64 reference on the dequantised stored bytes into ref.
void run_fp8_decode(const Fp8Case& fc, const TensorView& q, const TensorView& out,
                    const TensorView& lse, const std::vector<int64_t>& lens, int64_t q_len,
                    const Fp8Mods& mods, test::RefAttention& ref) {
  const Tensor seqlens = test::int_tensor(lens);
  DecodeArgs a;
  a.q = q;
  a.k_cache = fc.kv.k_cache;
  a.v_cache = fc.kv.v_cache;
  a.cache_seqlens = seqlens.view();
  a.q_len = q_len;
  set_shared_args(a, fc, mods, out, lse);
  ASSERT_NO_THROW(decode_attention(a));
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  ref = test::decode_reference(q, fc.k_deq.view(), fc.v_deq.view(), fc.kv.block_table,
                               seqlens.view(), q_len, scale, mods.causal, mods.mask);
}

// The same for the paged prefill (sequence b: cu_q / cu_k's rows and keys).
void run_fp8_prefill(const Fp8Case& fc, const TensorView& q, const TensorView& out,
                     const TensorView& lse, const std::vector<int64_t>& cu_q,
                     const std::vector<int64_t>& cu_k, const Fp8Mods& mods,
                     test::RefAttention& ref) {
  const Tensor tq = test::int_tensor(cu_q), tk = test::int_tensor(cu_k);
  PrefillArgs a;
  a.q = q;
  a.k = fc.kv.k_cache;
  a.v = fc.kv.v_cache;
  a.cu_seqlens_q = tq.view();
  a.cu_seqlens_k = tk.view();
  set_shared_args(a, fc, mods, out, lse);
  ASSERT_NO_THROW(prefill_attention(a));
  ref = test::paged_prefill_reference(q, fc.k_deq.view(), fc.v_deq.view(), fc.kv.block_table,
                                      cu_q, cu_k, 1.0 / std::sqrt(static_cast<double>(q.size(2))),
                                      mods.causal, mods.mask);
}

TEST(Fp8KvCache, DecodeMatchesReferenceOnStoredBytes) {
  int c = 0;
  for (int64_t group : {1, 2, 3, 4, 6, 8}) {
    for (int64_t bs : {1, 16, 7}) {
      if (test::kSanitized && (c++ % 3) != 0) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      const DType dt = uniform_int(rng, 0, 1) ? DType::kF32 : DType::kBF16;
      const int64_t hkv = uniform_int(rng, 1, 2), H = hkv * group;
      const int64_t d = test::pick(rng, std::vector<int64_t>{64, 128, 40});
      const int64_t q_len = test::pick(rng, std::vector<int64_t>{1, 1, 3});
      const int64_t batch = test::pick(rng, std::vector<int64_t>{1, 3, 5});
      std::vector<int64_t> lens = draw_lens(rng, batch, q_len);
      if (q_len > 1) lens[0] = q_len - 1;  // its first row sees no key
      std::ostringstream what;
      what << dt << " G" << group << " bs" << bs << " D" << d << " ql" << q_len;
      SCOPED_TRACE(test::case_note(c, seed, what.str()));
      Fp8Case fc = make_fp8_case(rng, hkv, d, bs, lens);
      const int64_t rows = batch * q_len;
      test::RowBuffer q = test::make_rows(rows, H, d, dt, uniform_int(rng, 0, 5));
      test::fill_random(q.view, rng, -2.0f, 2.0f);
      test::RowBuffer out = test::make_rows(rows, H, d, dt, 0);
      Tensor lse = Tensor::empty({H, rows}, DType::kF32);
      test::poison(lse.view());
      test::RefAttention ref;
      run_fp8_decode(fc, q.view, out.view, lse.view(), lens, q_len, {}, ref);
      if (::testing::Test::HasFatalFailure()) return;
      test::expect_attention_close(ref, out.view, lse.view(), "decode fp8 cache", what.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(Fp8KvCache, PagedPrefillMatchesReferenceOnStoredBytes) {
  int c = 0;
  for (int64_t group : {1, 3, 4, 8}) {
    for (int64_t bs : {1, 16, 5}) {
      if (test::kSanitized && (c++ % 3) != 0) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      const DType dt = uniform_int(rng, 0, 1) ? DType::kF32 : DType::kBF16;
      const int64_t hkv = uniform_int(rng, 1, 2), H = hkv * group;
      const int64_t d = test::pick(rng, std::vector<int64_t>{64, 128, 24});
      const int64_t batch = test::pick(rng, std::vector<int64_t>{1, 3, 4});
      std::vector<int64_t> lk = draw_lens(rng, batch, 0), cu_q{0}, cu_k{0};
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t lq = uniform_int(rng, 0, 1) ? lk[b] : uniform_int(rng, 0, lk[b]);  // prefix hit
        cu_q.push_back(cu_q.back() + lq);
        cu_k.push_back(cu_k.back() + lk[b]);
      }
      std::ostringstream what;
      what << dt << " G" << group << " bs" << bs << " D" << d << " B" << batch;
      SCOPED_TRACE(test::case_note(c, seed, what.str()));
      Fp8Case fc = make_fp8_case(rng, hkv, d, bs, lk);
      const int64_t total_q = cu_q.back();
      test::RowBuffer q = test::make_rows(total_q, H, d, dt, uniform_int(rng, 0, 5));
      test::fill_random(q.view, rng, -2.0f, 2.0f);
      test::RowBuffer out = test::make_rows(total_q, H, d, dt, 0);
      Tensor lse = Tensor::empty({H, total_q}, DType::kF32);
      test::poison(lse.view());
      test::RefAttention ref;
      run_fp8_prefill(fc, q.view, out.view, lse.view(), cu_q, cu_k, {}, ref);
      if (::testing::Test::HasFatalFailure()) return;
      test::expect_attention_close(ref, out.view, lse.view(), "prefill paged fp8 cache",
                                   what.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Window, softcap and ALiBi over fp8 caches, head_dim 256 / 80 / 96 among them: decode and
// paged prefill against the float64 reference on the stored bytes (the CPU backend is the
// reference of the GPU tests for these forms: KVATTN_FP8_EXTENDED_FORMS). k_scale changes
// the raw scores' units, so a softcap or slope folded in the wrong units shows here.
TEST(Fp8KvCache, FeaturesAndWideHeadsMatchReferenceOnStoredBytes) {
  for (int c = 0; c < test::case_count(24, 8); ++c) {
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = uniform_int(rng, 0, 1) ? DType::kF32 : DType::kBF16;
    const int64_t group = test::pick(rng, std::vector<int64_t>{1, 3, 4});
    const int64_t hkv = uniform_int(rng, 1, 2), H = hkv * group;
    const int64_t d = std::vector<int64_t>{256, 80, 96, 64}[c % 4];
    const int64_t bs = test::pick(rng, std::vector<int64_t>{1, 16, 5});
    const bool decode = c % 2 == 0;
    Fp8Mods mods;
    test::RefMask& mask = mods.mask;
    if (uniform_int(rng, 0, 2) != 0) {
      mask.window_left = test::pick(rng, std::vector<int64_t>{0, 7, 40});
    }
    if (uniform_int(rng, 0, 2) == 0) {
      mask.window_right = test::pick(rng, std::vector<int64_t>{0, 3});
    }
    if (uniform_int(rng, 0, 1) == 0) mask.softcap = test::pick(rng, std::vector<double>{2.0, 10.0});
    if (uniform_int(rng, 0, 1) == 0) {
      mods.slopes = random_scales(rng, H, 0.01f, 0.5f);
      for (int64_t h = 0; h < H; ++h) mask.alibi.push_back(mods.slopes.ptr<float>()[h]);
    }
    mods.causal = uniform_int(rng, 0, 3) != 0;  // overrides a right bound (flash-attn)
    const int64_t batch = test::pick(rng, std::vector<int64_t>{1, 3});
    const int64_t q_len = decode ? test::pick(rng, std::vector<int64_t>{1, 2}) : 0;
    std::vector<int64_t> lens = draw_lens(rng, batch, q_len);
    std::vector<int64_t> cu_q{0}, cu_k{0};
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t lq = decode ? q_len : uniform_int(rng, 0, lens[b]);
      cu_q.push_back(cu_q.back() + lq);
      cu_k.push_back(cu_k.back() + lens[b]);
    }
    std::ostringstream what;
    what << (decode ? "decode " : "prefill ") << dt << " G" << group << " bs" << bs << " D" << d
         << (mods.causal ? " causal" : "") << " window (" << mask.window_left << ", "
         << mask.window_right << ") softcap " << mask.softcap << " alibi " << !mask.alibi.empty();
    SCOPED_TRACE(test::case_note(c, seed, what.str()));
    Fp8Case fc = make_fp8_case(rng, hkv, d, bs, lens);
    const int64_t total_q = cu_q.back();
    test::RowBuffer q = test::make_rows(total_q, H, d, dt, uniform_int(rng, 0, 5));
    test::fill_random(q.view, rng, -4.0f, 4.0f);  // scores large enough for the cap to bite
    test::RowBuffer out = test::make_rows(total_q, H, d, dt, 0);
    Tensor lse = Tensor::empty({H, total_q}, DType::kF32);
    test::poison(lse.view());
    test::RefAttention ref;
    if (decode) {
      run_fp8_decode(fc, q.view, out.view, lse.view(), lens, q_len, mods, ref);
    } else {
      run_fp8_prefill(fc, q.view, out.view, lse.view(), cu_q, cu_k, mods, ref);
    }
    if (::testing::Test::HasFatalFailure()) return;
    test::expect_attention_close(ref, out.view, lse.view(), "fp8 cache with features",
                                 what.str());
    if (::testing::Test::HasFailure()) return;
  }
}

// ---- end to end: fp8 against bf16 caches on the same random keys ----

TEST(Fp8KvCache, EndToEndErrorAgainstBf16CacheIsPrinted) {
  std::mt19937_64 rng(test::case_seed());
  const int64_t hkv = 2, H = 8, d = 128, bs = 16, L = 500;
  Tensor key = Tensor::empty({L, hkv, d}, DType::kBF16), value = Tensor::empty({L, hkv, d}, DType::kBF16);
  test::fill_random(key.view(), rng, -4.0f, 4.0f);
  test::fill_random(value.view(), rng, -1.0f, 1.0f);
  // amax / 448 per KV head, the calibration the engine does.
  Tensor ks = Tensor::empty({hkv}, DType::kF32), vs = Tensor::empty({hkv}, DType::kF32);
  for (int64_t h = 0; h < hkv; ++h) {
    double ka = 0, va = 0;
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t x = 0; x < d; ++x) {
        ka = std::max(ka, std::fabs(test::element(key.view(), (t * hkv + h) * d + x)));
        va = std::max(va, std::fabs(test::element(value.view(), (t * hkv + h) * d + x)));
      }
    }
    ks.ptr<float>()[h] = static_cast<float>(ka / kE4M3Max);
    vs.ptr<float>()[h] = static_cast<float>(va / kE4M3Max);
  }
  const int64_t nb = (L + bs - 1) / bs;
  std::vector<int64_t> slots(L), table(nb);
  for (int64_t i = 0; i < L; ++i) slots[i] = i;
  for (int64_t i = 0; i < nb; ++i) table[i] = i;
  Tensor sm = test::int_tensor(slots), bt = test::int_tensor_2d(table, 1, nb);
  Tensor lens = test::int_tensor({L});
  Tensor q = Tensor::empty({1, H, d}, DType::kBF16);
  test::fill_random(q.view(), rng, -1.0f, 1.0f);
  std::vector<double> outs[2];
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    const DType cdt = fp8 ? DType::kF8E4M3 : DType::kBF16;
    Tensor kc = Tensor::empty({nb, bs, hkv, d}, cdt), vc = Tensor::empty({nb, bs, hkv, d}, cdt);
    store_kv(key.view(), value.view(), kc.view(), vc.view(), sm.view(),
             fp8 ? ks.view() : TensorView(), fp8 ? vs.view() : TensorView());
    Tensor out = Tensor::empty({1, H, d}, DType::kBF16);
    DecodeArgs a;
    a.q = q.view();
    a.k_cache = kc.view();
    a.v_cache = vc.view();
    if (fp8) {
      a.k_scale = ks.view();
      a.v_scale = vs.view();
    }
    a.block_table = bt.view();
    a.cache_seqlens = lens.view();
    a.out = out.view();
    decode_attention(a);
    outs[fp8] = test::to_doubles(out.view());
  }
  const test::ErrorStats s = test::compare(outs[1], outs[0]);
  std::printf("[fp8 end to end] decode L=%lld H=%lld/%lld D=%lld, amax/448 scales: rel L2 of "
              "the fp8-cache output against the bf16-cache output %.3e, max abs %.3e\n",
              static_cast<long long>(L), static_cast<long long>(H), static_cast<long long>(hkv),
              static_cast<long long>(d), s.rel_l2, s.max_abs);
  EXPECT_FALSE(s.has_nan);
  EXPECT_LT(s.rel_l2, 0.1) << "fp8 is far from bf16: quantisation is broken, not just lossy";
}

// ---- validation ----

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Fp8KvCache, BadScalesAreRejectedNamingTheArgument) {
  Tensor key = Tensor::empty({2, 2, 8}, DType::kF32), value = Tensor::empty({2, 2, 8}, DType::kF32);
  std::mt19937_64 rng(1);
  test::fill_uniform(key.view(), rng);
  test::fill_uniform(value.view(), rng);
  Tensor kc = Tensor::empty({2, 4, 2, 8}, DType::kF8E4M3), vc = Tensor::empty({2, 4, 2, 8}, DType::kF8E4M3);
  Tensor sm = test::int_tensor({0, 5});
  Tensor good = Tensor::empty({2}, DType::kF32);
  good.ptr<float>()[0] = good.ptr<float>()[1] = 0.5f;
  auto store = [&](const TensorView& ks, const TensorView& vs) {
    return error_of([&] { store_kv(key.view(), value.view(), kc.view(), vc.view(), sm.view(), ks, vs); });
  };
  Tensor three = Tensor::empty({3}, DType::kF32);
  EXPECT_NE(store(three.view(), good.view()).find("store_kv: k_scale num_kv_heads must be 2 but is 3"),
            std::string::npos) << store(three.view(), good.view());
  Tensor f16 = Tensor::empty({2}, DType::kF16);
  EXPECT_NE(store(good.view(), f16.view()).find("store_kv: v_scale dtype must be float32 but is float16"),
            std::string::npos);
  Tensor r2 = Tensor::empty({1, 2}, DType::kF32);
  EXPECT_NE(store(r2.view(), good.view()).find("store_kv: k_scale must have rank 1 but has rank 2"),
            std::string::npos);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    Tensor s = Tensor::empty({2}, DType::kF32);
    s.ptr<float>()[0] = 1.0f;
    s.ptr<float>()[1] = bad;
    const std::string msg = store(good.view(), s.view());
    EXPECT_NE(msg.find("store_kv: v_scale[1] must be finite and > 0 but is"), std::string::npos)
        << msg;
  }
  // Scales for a cache that is not fp8; packed prefill with scales.
  Tensor fc = Tensor::empty({2, 4, 2, 8}, DType::kF32), fv = Tensor::empty({2, 4, 2, 8}, DType::kF32);
  const std::string msg = error_of([&] {
    store_kv(key.view(), value.view(), fc.view(), fv.view(), sm.view(), good.view(), TensorView());
  });
  EXPECT_NE(msg.find("store_kv: k_scale applies to float8_e4m3 caches only but k_cache dtype is float32"),
            std::string::npos) << msg;
  Tensor q = Tensor::empty({2, 4, 8}, DType::kF32), out = Tensor::empty({2, 4, 8}, DType::kF32);
  Tensor cu = test::int_tensor({0, 2});
  PrefillArgs p;
  p.q = q.view();
  p.k = key.view();
  p.v = value.view();
  p.cu_seqlens_q = cu.view();
  p.cu_seqlens_k = cu.view();
  p.out = out.view();
  p.k_scale = good.view();
  EXPECT_NE(error_of([&] { prefill_attention(p); }).find("apply to paged float8_e4m3 caches"),
            std::string::npos);
  // Decode: a scale of the wrong length.
  Tensor bt = test::int_tensor_2d({0, 1}, 1, 2), lens = test::int_tensor({5});
  Tensor q1 = Tensor::empty({1, 4, 8}, DType::kF32), o1 = Tensor::empty({1, 4, 8}, DType::kF32);
  DecodeArgs a;
  a.q = q1.view();
  a.out = o1.view();
  a.k_cache = kc.view();
  a.v_cache = vc.view();
  a.block_table = bt.view();
  a.cache_seqlens = lens.view();
  a.k_scale = good.view();
  a.v_scale = three.view();
  EXPECT_NE(error_of([&] { decode_attention(a); })
                .find("decode_attention: v_scale num_kv_heads must be 2 but is 3"),
            std::string::npos);
  // A float16 cache for float32 keys is not a conversion kvattn does.
  Tensor hc = Tensor::empty({2, 4, 2, 8}, DType::kF16), hv = Tensor::empty({2, 4, 2, 8}, DType::kF16);
  EXPECT_NE(error_of([&] { store_kv(key.view(), value.view(), hc.view(), hv.view(), sm.view()); })
                .find("store_kv: k_cache dtype must be float32 (key's) or float8_e4m3 or bfloat16 but is float16"),
            std::string::npos);
}

TEST(Fp8KvCache, CudaEntriesRejectFp8CachesForFloat32InputsBeforeTouchingMemory) {
  // Views on cuda:0 that are never dereferenced: the entries must fail in validation (CUDA
  // reads and writes fp8 caches for bfloat16/float16 keys and queries only).
  alignas(16) static uint8_t fake[4096];
  const Device gpu = Device::cuda(0);
  TensorView key(fake, DType::kF32, gpu, {2, 2, 8}), value(fake, DType::kF32, gpu, {2, 2, 8});
  TensorView kc(fake, DType::kF8E4M3, gpu, {2, 4, 2, 8}), vc(fake, DType::kF8E4M3, gpu, {2, 4, 2, 8});
  TensorView sm(fake, DType::kI32, gpu, {2});
  const std::string want = "k_cache: a float8_e4m3 cache on CUDA needs bfloat16 or float16 ";
  std::string msg = error_of([&] { store_kv(key, value, kc, vc, sm); });
  EXPECT_NE(msg.find("store_kv: " + want + "key but key is float32"), std::string::npos) << msg;
  TensorView q(fake, DType::kF32, gpu, {1, 4, 8}), out(fake, DType::kF32, gpu, {1, 4, 8});
  TensorView bt(fake, DType::kI32, gpu, {1, 2}), lens(fake, DType::kI32, gpu, {1});
  DecodeArgs a;
  a.q = q;
  a.out = out;
  a.k_cache = kc;
  a.v_cache = vc;
  a.block_table = bt;
  a.cache_seqlens = lens;
  msg = error_of([&] { decode_attention(a); });
  const std::string q_want = "q dtype must be bfloat16 or float16 on cuda:0 but is float32";
  EXPECT_NE(msg.find("decode_attention: " + q_want), std::string::npos) << msg;
  PrefillArgs p;
  p.q = q;
  p.out = out;
  p.k = kc;
  p.v = vc;
  p.block_table = bt;
  p.cu_seqlens_q = TensorView(fake, DType::kI32, gpu, {2});
  p.cu_seqlens_k = TensorView(fake, DType::kI32, gpu, {2});
  p.max_seqlen_q = 1;
  msg = error_of([&] { prefill_attention(p); });
  EXPECT_NE(msg.find("prefill_attention: " + q_want), std::string::npos) << msg;
}

}  // namespace
}  // namespace kvattn
