// The fused q/k-norm + RoPE + KV write (engine/model/cuda_rope_kv.h) against the unfused
// kernels it replaces, qk_norm_rope then kvattn::store_kv, on the same random inputs: the
// rotated qkv rows and every byte of both caches must be identical (bf16 and e4m3 caches,
// head_dim 64 and 128, GQA groups 1, 2 and 8, qwen3's q/k norms on and off, both RoPE
// styles, partial rotary dims (Phi-4-mini's half of a head; the rest pass through), page
// sizes 1 and 16, 1 to 100 tokens, pad rows). Both paths run the same device
// arithmetic (norm_head, rope_pair) and the same e4m3 conversion (quantize_e4m3), so nothing
// less than equality is accepted. The caches start poisoned: slots no token maps to, and every
// pad row's, must keep the poison. A float64 model of the norm and rotation checks the shared
// arithmetic itself, within a bf16 bound (see expect_close_to_model). Exits 77 without a CUDA
// device (or in a build without the CUDA backend).
//
// Issue 20 replaced the warp-per-(token, head) kernel with a CTA per token (cuda_rope_kv.cu);
// LegacyKernel checks the two byte for byte (qkv and both caches) on the engine's shapes
// (Qwen3-0.6B, SmolLM2, head_dim 256) at 1, 7, 4096 and 4097 tokens, positions up to 40,000,
// with an inv_freq table and YaRN's factor, dynamic NTK, and a row stride the token kernel
// does not take (the legacy fallback).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "engine_test_util.h"
#include "rope_kv_test_util.h"
#include "kvattn/core/device.h"
#include "kvattn/core/error.h"
#include "kvattn/core/tensor.h"
#include "support/case_util.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_rope_kv.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/store_kv.h"
#endif

namespace kvattn {
namespace {

#ifdef KVATTN_WITH_CUDA

float bf2f(uint16_t b) { return bf16_to_float(bf16_t{b}); }
uint16_t f2bf(float f) { return float_to_bf16(f).bits; }  // round to nearest even

struct Case {
  int64_t tokens, heads, kv_heads, head_dim, block_size;
  bool qk_norm, interleaved, fp8;
  int64_t pad_cols;  // qkv row stride = (heads + 2 kv_heads) * head_dim + pad_cols
  int64_t rotary = 0;  // rotated dims of a head (0: all; partial rotary embeddings)
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << "T " << c.tokens << " H " << c.heads << "/" << c.kv_heads << " D " << c.head_dim
     << " bs " << c.block_size << (c.qk_norm ? " qk_norm" : "")
     << (c.interleaved ? " interleaved" : " rotate-half") << (c.fp8 ? " e4m3" : " bf16")
     << " ld+" << c.pad_cols;
  if (c.rotary > 0) os << " rotary " << c.rotary;
  return os.str();
}

// The host side of one case: inputs, and the caches' initial (poisoned) bytes.
struct Inputs {
  std::vector<uint16_t> qkv, q_norm, k_norm;
  std::vector<int32_t> pos, slots;
  std::vector<float> k_scale, v_scale;
  std::vector<uint8_t> cache;  // [num_blocks, 2 (K, V), block_size, kv_heads, head_dim]
  int64_t ld = 0, num_blocks = 0, elem = 2;
};

Inputs make_inputs(const Case& c, std::mt19937_64& rng, bool bad_slot) {
  Inputs in;
  in.ld = (c.heads + 2 * c.kv_heads) * c.head_dim + c.pad_cols;
  in.elem = c.fp8 ? 1 : 2;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), w(0.5f, 1.5f), sc(0.004f, 0.05f);
  in.qkv.resize(c.tokens * in.ld);
  for (auto& x : in.qkv) x = f2bf(u(rng));
  if (c.qk_norm) {
    for (auto* nw : {&in.q_norm, &in.k_norm}) {
      nw->resize(c.head_dim);
      for (auto& x : *nw) x = f2bf(w(rng));
    }
  }
  std::uniform_int_distribution<int32_t> p(0, 4095);
  for (int64_t t = 0; t < c.tokens; ++t) in.pos.push_back(p(rng));
  // Distinct slots spread over a cache about twice the size needed; every fifth token a pad
  // row (-1), and with bad_slot one token past the cache.
  const int64_t need = 2 * c.tokens + c.block_size;
  in.num_blocks = (need + c.block_size - 1) / c.block_size;
  std::vector<int32_t> all(in.num_blocks * c.block_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t t = 0; t < c.tokens; ++t) in.slots.push_back(t % 5 == 3 ? -1 : all[t]);
  if (bad_slot) in.slots[c.tokens / 2] = static_cast<int32_t>(all.size() + 7);
  if (c.fp8) {  // small scales: some x / scale pass 448 and saturate
    for (auto* s : {&in.k_scale, &in.v_scale}) {
      s->resize(c.kv_heads);
      for (auto& x : *s) x = sc(rng);
    }
  }
  in.cache.resize(in.num_blocks * 2 * c.block_size * c.kv_heads * c.head_dim * in.elem);
  for (size_t i = 0; i < in.cache.size(); ++i) in.cache[i] = static_cast<uint8_t>(0xA5 ^ (i * 131));
  return in;
}

using test::download;
using test::upload;

// One path's device state.
struct Run {
  Tensor qkv, cache, pos, slots, q_norm, k_norm, k_scale, v_scale;
  TensorView k_cache, v_cache;
};

Run stage(const Case& c, const Inputs& in) {
  Run r;
  r.qkv = upload(in.qkv, DType::kBF16);
  r.cache = upload(in.cache, DType::kU8);
  r.pos = upload(in.pos, DType::kI32);
  r.slots = upload(in.slots, DType::kI32);
  if (c.qk_norm) {
    r.q_norm = upload(in.q_norm, DType::kBF16);
    r.k_norm = upload(in.k_norm, DType::kBF16);
  }
  if (c.fp8) {
    r.k_scale = upload(in.k_scale, DType::kF32);
    r.v_scale = upload(in.v_scale, DType::kF32);
  }
  const test::PagedKV kv =
      test::paged_kv_views(r.cache.data(), c.fp8 ? DType::kF8E4M3 : DType::kBF16, in.elem,
                           in.num_blocks, c.block_size, c.kv_heads, c.head_dim);
  r.k_cache = kv.k;
  r.v_cache = kv.v;
  return r;
}

cuda_model::QkNormRope rope_of(const Case& c, const Inputs& in, const Run& r) {
  return test::test_rope(r.qkv.data(), in.ld, c.tokens, c.heads, c.kv_heads, c.head_dim,
                         c.qk_norm ? r.q_norm.data() : nullptr,
                         c.qk_norm ? r.k_norm.data() : nullptr, r.pos.ptr<const int32_t>(),
                         c.interleaved, c.rotary);
}

// The float64 model of one head: norm (when given) and rotation, no intermediate rounding.
// Bound: the kernels round x * inv and w * that to bf16 (a, b within 2^-8 relative), cos and
// sin (within 2^-9 absolute), both products and the sum (2^-9 relative each), and compute the
// angle in float32 (at positions < 4096 within 3 * 4096 * 2^-24 < 2^-9 rad), so each output is
// within about 6 * 2^-9 (|a| + |b|) of the model, a and b the normed pair; the bound taken is
// 2^-5 (|a| + |b|) + 1e-3, well above that and far below a wrong rotation or norm.
// Partial rotary: the first R dims rotate (pairs within them, frequencies over R); the others
// must hold the normed values within 2^-7 |x| + 1e-3 (one bf16 rounding more than the model).
void expect_close_to_model(const Case& c, const Inputs& in, const std::vector<uint16_t>& out) {
  const int64_t D = c.head_dim, R = c.rotary > 0 ? c.rotary : D, half = R / 2;
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.heads + c.kv_heads; ++h) {
      const uint16_t* x = &in.qkv[t * in.ld + h * D];
      const std::vector<uint16_t>& nw = h < c.heads ? in.q_norm : in.k_norm;
      std::vector<double> s(D);
      double ss = 0.0;
      for (int64_t i = 0; i < D; ++i) {
        s[i] = bf2f(x[i]);
        ss += s[i] * s[i];
      }
      if (c.qk_norm) {
        const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
        for (int64_t i = 0; i < D; ++i) s[i] = bf2f(nw[i]) * s[i] * inv;
      }
      for (int64_t i = 0; i < half; ++i) {
        const double ang = in.pos[t] / std::pow(1000000.0, 2.0 * i / R);
        const int64_t ia = c.interleaved ? 2 * i : i, ib = c.interleaved ? 2 * i + 1 : i + half;
        const double a = s[ia], b = s[ib];
        const double ra = a * std::cos(ang) - b * std::sin(ang);
        const double rb = b * std::cos(ang) + a * std::sin(ang);
        const double tol = std::ldexp(std::fabs(a) + std::fabs(b), -5) + 1e-3;
        const double ea = std::fabs(bf2f(out[t * in.ld + h * D + ia]) - ra);
        const double eb = std::fabs(bf2f(out[t * in.ld + h * D + ib]) - rb);
        worst = std::max({worst, ea / tol, eb / tol});
        bad += (!(ea <= tol)) + (!(eb <= tol));
      }
      for (int64_t i = R; i < D; ++i) {  // partial rotary: passed through
        const double tol = std::ldexp(std::fabs(s[i]), -7) + 1e-3;
        const double e = std::fabs(bf2f(out[t * in.ld + h * D + i]) - s[i]);
        worst = std::max(worst, e / tol);
        bad += !(e <= tol);
      }
    }
  }
  EXPECT_EQ(bad, 0) << "q/k elements outside the bf16 bound of the float64 model (worst "
                    << worst << " x the bound)";
}

void run_case(const Case& c, uint64_t seed, bool bad_slot = false) {
  SCOPED_TRACE(test::case_note(0, seed, describe(c)));
  std::mt19937_64 rng(seed);
  const Inputs in = make_inputs(c, rng, bad_slot);
  Run a = stage(c, in), b = stage(c, in);
  ASSERT_EQ(read_device_faults(Device::cuda(0), true), 0u);

  // Unfused: qk_norm_rope, then the public store_kv on views into the rotated qkv.
  cuda_model::qk_norm_rope(rope_of(c, in, a), nullptr);
  char* qa = static_cast<char*>(a.qkv.data());
  const int64_t D = c.head_dim;
  const TensorView k(qa + c.heads * D * 2, DType::kBF16, Device::cuda(0),
                     {c.tokens, c.kv_heads, D}, {in.ld, D, 1});
  const TensorView v(qa + (c.heads + c.kv_heads) * D * 2, DType::kBF16, Device::cuda(0),
                     {c.tokens, c.kv_heads, D}, {in.ld, D, 1});
  store_kv(k, v, a.k_cache, a.v_cache, a.slots.view().slice0(0, c.tokens), a.k_scale.view(),
           a.v_scale.view(), Stream{});
  const uint32_t faults_a = read_device_faults(Device::cuda(0), true);

  // Fused.
  cuda_model::KVWrite kv;
  kv.k_cache = b.k_cache;
  kv.v_cache = b.v_cache;
  kv.k_scale = b.k_scale.view();
  kv.v_scale = b.v_scale.view();
  kv.slot_mapping = b.slots.view();
  cuda_model::qk_norm_rope_store_kv(rope_of(c, in, b), kv, nullptr);
  const uint32_t faults_b = read_device_faults(Device::cuda(0), true);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ(faults_a, bad_slot ? uint32_t{kFaultSlotOutOfRange} : 0u);
  EXPECT_EQ(faults_b, faults_a) << "the fused kernel's faults differ from store_kv's";

  const auto qkv_a = download<uint16_t>(a.qkv, in.qkv.size());
  const auto qkv_b = download<uint16_t>(b.qkv, in.qkv.size());
  int64_t qkv_diff = 0;
  for (size_t i = 0; i < qkv_a.size(); ++i) qkv_diff += qkv_a[i] != qkv_b[i];
  EXPECT_EQ(qkv_diff, 0) << "qkv elements differ between fused and unfused";
  // Columns past the heads and the v heads are untouched.
  const int64_t qk_cols = (c.heads + c.kv_heads) * D;
  int64_t touched = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = qk_cols; j < in.ld; ++j) touched += qkv_b[t * in.ld + j] != in.qkv[t * in.ld + j];
  }
  EXPECT_EQ(touched, 0) << "the fused kernel wrote v or padding columns of qkv";

  const auto cache_a = download<uint8_t>(a.cache, in.cache.size());
  const auto cache_b = download<uint8_t>(b.cache, in.cache.size());
  int64_t cache_diff = 0;
  for (size_t i = 0; i < cache_a.size(); ++i) cache_diff += cache_a[i] != cache_b[i];
  EXPECT_EQ(cache_diff, 0) << "cache bytes differ between fused and unfused";

  // Rows of slots no (valid) token maps to keep the poison; mapped rows changed somewhere.
  const int64_t row_bytes = c.kv_heads * D * in.elem;
  std::vector<char> mapped(in.num_blocks * c.block_size, 0);
  for (int32_t s : in.slots) {
    if (s >= 0 && s < static_cast<int64_t>(mapped.size())) mapped[s] = 1;
  }
  int64_t poison_lost = 0, unwritten = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(mapped.size()); ++s) {
    const int64_t blk = s / c.block_size, off = s % c.block_size;
    for (int kvsel = 0; kvsel < 2; ++kvsel) {
      const int64_t at = ((blk * 2 + kvsel) * c.block_size + off) * row_bytes;
      const bool same = std::memcmp(&cache_b[at], &in.cache[at], row_bytes) == 0;
      poison_lost += !mapped[s] && !same;
      unwritten += mapped[s] && same;
    }
  }
  EXPECT_EQ(poison_lost, 0) << "rows of unmapped slots (pad rows' included) were written";
  EXPECT_EQ(unwritten, 0) << "rows of mapped slots were not written";

  expect_close_to_model(c, in, qkv_b);
}

class FusedRopeKv : public ::testing::TestWithParam<bool> {};  // the cache is e4m3

TEST_P(FusedRopeKv, EqualsQkNormRopeThenStoreKv) {
  const bool fp8 = GetParam();
  const char* q = std::getenv("KVATTN_GPU_TEST_QUICK");  // compute-sanitizer runs
  const bool quick = q != nullptr && q[0] != '\0' && q[0] != '0';
  std::vector<Case> cases;
  for (int64_t D : {64, 128}) {
    for (const auto& [h, kvh] : std::vector<std::pair<int64_t, int64_t>>{{16, 8}, {8, 1}, {4, 4}}) {
      for (int64_t T : {1, 3, 17, 100}) {
        if (quick && T > 17) continue;
        const bool qk = (T + h) % 2 == 0;  // both settings over the sweep
        cases.push_back(Case{T, h, kvh, D, T == 3 ? 1 : 16, qk, T == 17, fp8, T == 1 ? 8 : 0});
        cases.push_back(Case{T, h, kvh, D, 16, !qk, false, fp8, 0});
        // Partial rotary (half the head, as Phi-4-mini; a quarter, interleaved).
        cases.push_back(Case{T, h, kvh, D, 16, qk, false, fp8, 0, D / 2});
        if (T == 17) cases.push_back(Case{T, h, kvh, D, 1, !qk, true, fp8, 8, D / 4});
      }
    }
  }
  // Qwen3-0.6B's layer at a decode batch of 256 (the engine's largest graph rung), and at a
  // 4,096-token prefill (issue 20's TTFT shape); SmolLM2's at 4,097.
  cases.push_back(Case{256, 16, 8, 128, 16, true, false, fp8, 0});
  if (!quick) {
    cases.push_back(Case{4096, 16, 8, 128, 16, true, false, fp8, 0});
    cases.push_back(Case{4097, 9, 3, 64, 16, false, false, fp8, 0});
  }
  for (const Case& c : cases) {
    run_case(c, test::case_seed());
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(FusedRopeKv, OutOfRangeSlotIsSkippedAndRecordedAsStoreKvDoes) {
  run_case(Case{9, 8, 2, 128, 16, true, false, GetParam(), 0}, test::case_seed(), true);
}

INSTANTIATE_TEST_SUITE_P(Cache, FusedRopeKv, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "e4m3" : "bf16"; });

// How the legacy comparison varies the frequencies.
enum class Freqs { kTheta, kTable, kDynamic };

struct LegacyCase {
  Case c;
  Freqs freqs;
};

// The token kernel against the legacy one on the same inputs: qk_norm_rope alone (qkv), then
// the fused store (qkv and every cache byte), and the fault words.
void run_legacy_case(const LegacyCase& lc, uint64_t seed) {
  const Case& c = lc.c;
  SCOPED_TRACE(test::case_note(0, seed, describe(c) + (lc.freqs == Freqs::kTable ? " table"
                                                       : lc.freqs == Freqs::kDynamic
                                                           ? " dynamic"
                                                           : " theta")));
  std::mt19937_64 rng(seed);
  Inputs in = make_inputs(c, rng, c.tokens > 4 && c.tokens % 2 == 1);
  std::uniform_int_distribution<int32_t> p(0, 40000);  // large angles: cosf's long reduction
  for (auto& x : in.pos) x = p(rng);
  std::vector<float> table(c.head_dim / 2);
  std::uniform_real_distribution<float> fr(1e-6f, 1.0f);
  for (auto& x : table) x = fr(rng);
  const Tensor dtable = upload(table, DType::kF32);
  auto params = [&](const Run& r) {
    cuda_model::QkNormRope q = rope_of(c, in, r);
    if (lc.freqs == Freqs::kTable) {
      q.inv_freq = dtable.ptr<const float>();
      q.attention_factor = 1.1f;
    } else if (lc.freqs == Freqs::kDynamic) {
      const double rot = static_cast<double>(c.rotary > 0 ? c.rotary : c.head_dim);
      q.dynamic.factor = 2.0f;
      q.dynamic.factor_minus_one = 1.0f;
      q.dynamic.exponent = static_cast<float>(rot / (rot - 2.0));
      q.dynamic.max_position = 2048;
    }
    return q;
  };
  struct Out {
    std::vector<uint16_t> rotated, qkv;
    std::vector<uint8_t> cache;
    uint32_t faults;
  };
  auto run = [&](bool legacy) {
    cuda_model::set_legacy_kernels(legacy);
    Run alone = stage(c, in), fused = stage(c, in);
    cuda_model::qk_norm_rope(params(alone), nullptr);
    cuda_model::KVWrite kv;
    kv.k_cache = fused.k_cache;
    kv.v_cache = fused.v_cache;
    kv.k_scale = fused.k_scale.view();
    kv.v_scale = fused.v_scale.view();
    kv.slot_mapping = fused.slots.view();
    cuda_model::qk_norm_rope_store_kv(params(fused), kv, nullptr);
    Out o;
    o.faults = read_device_faults(Device::cuda(0), true);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    o.rotated = download<uint16_t>(alone.qkv, in.qkv.size());
    o.qkv = download<uint16_t>(fused.qkv, in.qkv.size());
    o.cache = download<uint8_t>(fused.cache, in.cache.size());
    cuda_model::set_legacy_kernels(false);
    return o;
  };
  const Out old = run(true), now = run(false);
  auto diff = [](const auto& a, const auto& b) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
    return d;
  };
  EXPECT_EQ(diff(old.rotated, now.rotated), 0) << "qk_norm_rope's qkv differs from legacy";
  EXPECT_EQ(diff(old.qkv, now.qkv), 0) << "qk_norm_rope_store_kv's qkv differs from legacy";
  EXPECT_EQ(diff(old.cache, now.cache), 0) << "cache bytes differ from legacy";
  EXPECT_EQ(now.faults, old.faults) << "fault words differ";
  EXPECT_EQ(diff(now.rotated, now.qkv), 0) << "the fused and plain forms rotate differently";
}

TEST_P(FusedRopeKv, LegacyKernel) {
  const bool fp8 = GetParam();
  const char* q = std::getenv("KVATTN_GPU_TEST_QUICK");
  const bool quick = q != nullptr && q[0] != '\0' && q[0] != '0';
  std::vector<LegacyCase> cases;
  for (int64_t T : {1, 7, 4096, 4097}) {
    if (quick && T > 7) continue;
    const bool odd = T % 2 == 1;
    cases.push_back({Case{T, 16, 8, 128, 16, true, false, fp8, 0}, Freqs::kTable});  // Qwen3-0.6B
    cases.push_back({Case{T, 9, 3, 64, 16, false, false, fp8, 0}, Freqs::kTheta});   // SmolLM2
    cases.push_back({Case{T, 8, 4, 256, 16, true, odd, fp8, 0}, Freqs::kDynamic});
    cases.push_back({Case{T, 4, 4, 128, 1, odd, true, fp8, 8}, Freqs::kTheta});
    cases.push_back({Case{T, 4, 2, 64, 16, true, false, fp8, 2}, Freqs::kTable});  // legacy path
    // Partial rotary (Phi-4-mini: 24 heads of 128 dims, 96 rotating; here smaller): both
    // kernels, with a table, a dynamic base, and the legacy path's row stride.
    cases.push_back({Case{T, 8, 2, 128, 16, false, false, fp8, 0, 96}, Freqs::kTable});
    cases.push_back({Case{T, 4, 4, 64, 16, true, odd, fp8, 0, 32}, Freqs::kDynamic});
    cases.push_back({Case{T, 4, 2, 64, 16, true, false, fp8, 2, 16}, Freqs::kTheta});
  }
  for (const LegacyCase& c : cases) {
    run_legacy_case(c, test::case_seed());
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(FusedRopeKvArgs, BadCachesAreRefused) {
  Tensor qkv = Tensor::empty({4, (2 + 2) * 64}, DType::kBF16, Device::cuda(0));
  Tensor pos = Tensor::zeros({4}, DType::kI32, Device::cuda(0));
  Tensor slots = Tensor::zeros({4}, DType::kI32, Device::cuda(0));
  Tensor cache = Tensor::empty({2, 16, 1, 64}, DType::kBF16, Device::cuda(0));
  Tensor f32cache = Tensor::empty({2, 16, 1, 64}, DType::kF32, Device::cuda(0));
  cuda_model::QkNormRope p;
  p.qkv = qkv.data();
  p.ld = 4 * 64;
  p.tokens = 4;
  p.num_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.positions = pos.ptr<const int32_t>();
  cuda_model::KVWrite kv{cache.view(), cache.view(), {}, {}, slots.view()};
  EXPECT_NO_THROW(cuda_model::qk_norm_rope_store_kv(p, kv, nullptr));
  auto kv_bad = kv;
  kv_bad.k_cache = kv_bad.v_cache = f32cache.view();
  EXPECT_THROW(cuda_model::qk_norm_rope_store_kv(p, kv_bad, nullptr), Error);
  kv_bad = kv;
  kv_bad.slot_mapping = slots.view().slice0(0, 3);  // fewer slots than tokens
  EXPECT_THROW(cuda_model::qk_norm_rope_store_kv(p, kv_bad, nullptr), Error);
  kv_bad = kv;
  kv_bad.k_scale = pos.view();  // scales on a bf16 cache
  EXPECT_THROW(cuda_model::qk_norm_rope_store_kv(p, kv_bad, nullptr), Error);
  auto p_bad = p;
  p_bad.head_dim = 512;
  EXPECT_THROW(cuda_model::qk_norm_rope(p_bad, nullptr), Error);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(read_device_faults(Device::cuda(0), true), 0u);
}

#endif  // KVATTN_WITH_CUDA

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
