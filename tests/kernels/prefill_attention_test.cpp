// prefill_attention against the float64 reference on random adversarial cases (DESIGN §5):
// packed and paged keys, causal (bottom-right) and not, prefix cases Lq < Lk, Lq = 0, rows
// that see no key, GQA groups 1-8, any head_dim, batch 1/3/17, lengths 1/54/97/1000, pages
// 1/16/256, strided tokens, custom scales, LSE, f32 and bf16, and a 32k-key context.
#include "kvattn/kernels/prefill_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::pick;
using test::uniform_int;

struct Config {
  DType dt = DType::kF32;
  bool paged = false;
  bool causal = true;
  bool with_lse = true;
  bool fused_qkv = false;  // packed only: q, k, v cut out of one [tokens, (H+2Hkv)*D] buffer
  int64_t hkv = 1, group = 1, d = 64, bs = 16;
  float scale = 0.0f;  // 0 => 1/sqrt(d)
  float q_range = 1.0f, v_lo = -1.0f, v_hi = 1.0f;
  int64_t q_pad = 0, kv_pad = 0, out_pad = 0;
  std::vector<int64_t> lq, lk;

  int64_t heads() const { return hkv * group; }
  std::string describe() const {
    std::ostringstream os;
    os << dt << (paged ? " paged" : " packed") << (causal ? " causal" : " full") << " B "
       << lq.size() << " H " << heads() << "/" << hkv << " D " << d;
    if (paged) os << " bs " << bs;
    os << " scale " << scale << " pads " << q_pad << "/" << kv_pad << "/" << out_pad
       << (fused_qkv ? " fusedqkv" : "") << (with_lse ? " lse" : "") << " lens";
    for (size_t b = 0; b < lq.size(); ++b) os << " " << lq[b] << "x" << lk[b];
    return os.str();
  }
};

int64_t visible_pairs(int64_t lq, int64_t lk, bool causal) {
  if (!causal) return lq * lk;
  int64_t n = 0;
  for (int64_t i = 0; i < lq; ++i) n += std::clamp<int64_t>(i + lk - lq + 1, 0, lk);
  return n;
}

// Shrinks the longest query runs (then key runs) until the float64 reference stays cheap.
void fit_budget(Config& cfg, double budget) {
  const auto cost = [&] {
    double c = 0;
    for (size_t b = 0; b < cfg.lq.size(); ++b) {
      c += static_cast<double>(visible_pairs(cfg.lq[b], cfg.lk[b], cfg.causal));
    }
    return c * static_cast<double>(cfg.heads() * cfg.d);
  };
  while (cost() > budget) {
    size_t worst = 0;
    for (size_t b = 1; b < cfg.lq.size(); ++b) {
      if (cfg.lq[b] * std::max<int64_t>(cfg.lk[b], 1) >
          cfg.lq[worst] * std::max<int64_t>(cfg.lk[worst], 1)) {
        worst = b;
      }
    }
    if (cfg.lq[worst] > 1) {
      cfg.lq[worst] = std::max<int64_t>(1, cfg.lq[worst] / 2);
    } else {
      cfg.lk[worst] = cfg.lk[worst] > 1 ? ((cfg.lk[worst] / 2) | 1) : 0;  // odd: off the pages
    }
  }
}

Config draw_config(int c, std::mt19937_64& rng) {
  Config cfg;
  cfg.dt = c % 2 ? DType::kBF16 : DType::kF32;
  cfg.paged = (c / 2) % 2 == 1;
  cfg.bs = std::vector<int64_t>{1, 16, 256}[(c / 3) % 3];
  cfg.group = std::vector<int64_t>{1, 2, 4, 8}[(c / 4) % 4];
  cfg.causal = (c / 7) % 4 != 0;
  const int64_t batch = std::vector<int64_t>{1, 3, 17, uniform_int(rng, 2, 6)}[(c / 5) % 4];
  cfg.hkv = cfg.group == 8 ? 1 : pick(rng, std::vector<int64_t>{1, 2, 2, 3});
  cfg.d = pick(rng, std::vector<int64_t>{64, 64, 64, 128, 128, 128, 40, 96, 8, 3, 72, 256});
  const double inv = 1.0 / std::sqrt(static_cast<double>(cfg.d));
  cfg.scale = pick(rng, std::vector<float>{0.0f, 0.0f, 0.0f, static_cast<float>(0.5 * inv),
                                           static_cast<float>(2.0 * inv), 1.0f, 0.3f});
  cfg.q_range = pick(rng, std::vector<float>{1.0f, 3.0f});
  if (uniform_int(rng, 0, 1)) {
    cfg.v_lo = -0.5f;
    cfg.v_hi = 1.5f;
  }
  cfg.with_lse = uniform_int(rng, 0, 2) != 0;
  cfg.q_pad = pick(rng, std::vector<int64_t>{0, 0, 5, 64});
  cfg.kv_pad = pick(rng, std::vector<int64_t>{0, 0, 3, 64});
  cfg.out_pad = pick(rng, std::vector<int64_t>{0, 0, 7});
  for (int64_t b = 0; b < batch; ++b) {
    int64_t lk = pick(rng, std::vector<int64_t>{1, 54, 97, 1000, uniform_int(rng, 1, 300),
                                                uniform_int(rng, 1, 300)});
    if (uniform_int(rng, 0, 19) == 0) lk = 0;
    int64_t lq = lk;
    switch (uniform_int(rng, 0, 7)) {
      case 0: case 1: case 2: lq = lk; break;                           // plain prefill
      case 3: case 4: lq = uniform_int(rng, 1, std::max<int64_t>(1, std::min<int64_t>(lk, 64)));
              break;                                                     // prefix hit
      case 5: lq = 0; break;                                             // empty sequence
      case 6: lq = lk + uniform_int(rng, 1, 20); break;                  // Lq > Lk
      default: lq = uniform_int(rng, 1, std::max<int64_t>(1, lk)); break;
    }
    cfg.lq.push_back(lq);
    cfg.lk.push_back(lk);
  }
  fit_budget(cfg, (c % 25 == 0 ? 4e7 : 3e6));
  int64_t total_q = 0, total_k = 0;
  for (size_t b = 0; b < cfg.lq.size(); ++b) {
    total_q += cfg.lq[b];
    total_k += cfg.lk[b];
  }
  cfg.fused_qkv = !cfg.paged && total_q == total_k && uniform_int(rng, 0, 1) == 1;
  return cfg;
}

// Builds the tensors of a case, runs the op and checks it against the reference.
void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng) {
  SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
  const int64_t H = cfg.heads(), Hkv = cfg.hkv, D = cfg.d;
  std::vector<int64_t> cu_q(1, 0), cu_k(1, 0);
  int64_t max_q = 0, max_k = 0;
  for (size_t b = 0; b < cfg.lq.size(); ++b) {
    cu_q.push_back(cu_q.back() + cfg.lq[b]);
    cu_k.push_back(cu_k.back() + cfg.lk[b]);
    max_q = std::max(max_q, cfg.lq[b]);
    max_k = std::max(max_k, cfg.lk[b]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();

  test::RowBuffer qb, kb, vb, fused;
  test::PagedKv paged;
  TensorView q, k, v;
  if (cfg.fused_qkv) {
    fused = test::make_rows(total_q, H + 2 * Hkv, D, cfg.dt, cfg.q_pad);
    const int64_t es = dtype_size(cfg.dt), row = fused.view.stride(0);
    char* base = static_cast<char*>(fused.view.data);
    q = TensorView(base, cfg.dt, Device::cpu(), {total_q, H, D}, {row, D, 1});
    k = TensorView(base + H * D * es, cfg.dt, Device::cpu(), {total_k, Hkv, D}, {row, D, 1});
    v = TensorView(base + (H + Hkv) * D * es, cfg.dt, Device::cpu(), {total_k, Hkv, D},
                   {row, D, 1});
  } else {
    qb = test::make_rows(total_q, H, D, cfg.dt, cfg.q_pad, uniform_int(rng, 0, 3));
    q = qb.view;
    if (cfg.paged) {
      paged = test::make_paged_kv(rng, cfg.dt, Hkv, D, cfg.bs, cfg.lk, cfg.v_lo, cfg.v_hi);
      k = paged.k_cache;
      v = paged.v_cache;
    } else {
      kb = test::make_rows(total_k, Hkv, D, cfg.dt, cfg.kv_pad);
      vb = test::make_rows(total_k, Hkv, D, cfg.dt, cfg.kv_pad);
      k = kb.view;
      v = vb.view;
    }
  }
  test::fill_random(q, rng, -cfg.q_range, cfg.q_range);
  if (!cfg.paged) {
    test::fill_random(k, rng, -1.0f, 1.0f);
    test::fill_random(v, rng, cfg.v_lo, cfg.v_hi);
  }
  test::RowBuffer ob = test::make_rows(total_q, H, D, cfg.dt, cfg.out_pad);  // poisoned
  Tensor lse;
  if (cfg.with_lse) {
    lse = Tensor::empty({H, total_q}, DType::kF32);
    test::poison(lse.view());
  }
  Tensor cu_q_t = test::int_tensor(cu_q), cu_k_t = test::int_tensor(cu_k);

  PrefillArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.cu_seqlens_q = cu_q_t;
  a.cu_seqlens_k = cu_k_t;
  if (cfg.paged) a.block_table = paged.block_table;
  a.max_seqlen_q = max_q;
  a.max_seqlen_k = max_k;
  a.softmax_scale = cfg.scale;
  a.causal = cfg.causal;
  a.out = ob.view;
  if (cfg.with_lse) a.lse = lse.view();
  SCOPED_TRACE(cfg.paged ? paged.layout : std::string("packed"));
  ASSERT_NO_THROW(prefill_attention(a));

  const double scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const test::RefAttention ref =
      cfg.paged ? test::paged_prefill_reference(q, k, v, paged.block_table, cu_q, cu_k, scale,
                                                cfg.causal)
                : test::prefill_reference(q, k, v, cu_q, cu_k, scale, cfg.causal);
  std::ostringstream label;
  label << "c" << c << " " << cfg.dt << (cfg.paged ? " paged" : " packed")
        << (cfg.causal ? " causal" : " full") << " B" << cfg.lq.size() << " H" << H << "/" << Hkv
        << " D" << D << " q" << total_q << " k" << total_k;
  const std::string key = std::string("prefill ") + (cfg.paged ? "paged " : "packed ") +
                          std::string(dtype_name(cfg.dt));
  test::expect_attention_close(ref, ob.view, cfg.with_lse ? lse.view() : TensorView(), key,
                               label.str());
  EXPECT_TRUE(test::untouched_outside(ob.storage, ob.view)) << "wrote outside out";
}

// The reference itself, on cases small enough to work out by hand.
TEST(Reference, HandComputedCases) {
  const double e = std::exp(1.0);
  // One query, two keys, scale 1: scores 1 and 0.
  {
    const double q[] = {1, 0}, k[] = {1, 0, 0, 1}, v[] = {1, 2, 3, 4};
    double out[2], lse[1];
    test::attention_reference(q, k, v, 1, 2, 1, 1, 2, 1.0, false, out, lse, 1);
    const double p0 = e / (e + 1), p1 = 1 / (e + 1);
    EXPECT_NEAR(out[0], p0 * 1 + p1 * 3, 1e-15);
    EXPECT_NEAR(out[1], p0 * 2 + p1 * 4, 1e-15);
    EXPECT_NEAR(lse[0], std::log(e + 1), 1e-15);
  }
  // Bottom-right causal, Lq = 3 > Lk = 1: rows 0 and 1 see nothing, row 2 sees key 0.
  // GQA: 2 query heads share the single KV head. lse is [H, Lq] with stride Lq.
  {
    const double q[] = {1, 1, 2, 2, 3, 3}, k[] = {0.5}, v[] = {7};
    double out[6], lse[6];
    test::attention_reference(q, k, v, 3, 1, 2, 1, 1, 2.0, true, out, lse, 3);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0) << i;
    EXPECT_EQ(out[4], 7.0);
    EXPECT_EQ(out[5], 7.0);
    for (int h = 0; h < 2; ++h) {
      EXPECT_TRUE(std::isinf(lse[h * 3 + 0]) && lse[h * 3 + 0] < 0);
      EXPECT_TRUE(std::isinf(lse[h * 3 + 1]) && lse[h * 3 + 1] < 0);
      EXPECT_DOUBLE_EQ(lse[h * 3 + 2], 3 * 0.5 * 2.0);
    }
  }
  // Lq = 2, Lk = 3, causal: row 0 sees keys 0..1, row 1 sees 0..2. Equal scores (q = 0):
  // plain averages of the visible values.
  {
    const double q[] = {0, 0}, k[] = {1, 2, 3}, v[] = {3, 6, 12};
    double out[2], lse[2];
    test::attention_reference(q, k, v, 2, 3, 1, 1, 1, 1.0, true, out, lse, 2);
    EXPECT_DOUBLE_EQ(out[0], 4.5);
    EXPECT_DOUBLE_EQ(out[1], 7.0);
    EXPECT_DOUBLE_EQ(lse[0], std::log(2.0));
    EXPECT_DOUBLE_EQ(lse[1], std::log(3.0));
  }
}

TEST(PrefillAttention, RandomCasesMatchFloat64Reference) {
  const int cases = test::case_count(320, 64);
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const Config cfg = draw_config(c, rng);
    run_case(c, seed, cfg, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Fixed shapes every run must contain, whatever the random draws.
TEST(PrefillAttention, AdversarialShapes) {
  struct Shape {
    bool paged, causal;
    int64_t group, d, bs;
    std::vector<int64_t> lq, lk;
  };
  const std::vector<Shape> shapes = {
      {false, true, 1, 64, 16, {54, 97, 1}, {54, 97, 1}},
      {true, true, 1, 128, 16, {1000}, {1000}},
      {true, true, 8, 64, 1, {3, 0, 7}, {54, 97, 1000}},        // prefix hits, Lq = 0
      {false, true, 2, 64, 16, {10, 5}, {4, 0}},                 // Lk < Lq, Lk = 0
      {true, false, 2, 40, 256, {97, 54, 0}, {97, 300, 257}},    // odd head_dim, full mask
      {false, true, 1, 96, 16, {0, 0, 0}, {5, 0, 9}},            // nothing to compute
      {true, true, 1, 128, 256, {1, 1, 1}, {256, 257, 255}},     // page boundaries
      {true, true, 4, 64, 16, std::vector<int64_t>(17, 5), std::vector<int64_t>(17, 37)},
  };
  int c = 1000;
  for (const Shape& s : shapes) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      Config cfg;
      cfg.dt = dt;
      cfg.paged = s.paged;
      cfg.causal = s.causal;
      cfg.group = s.group;
      cfg.hkv = 2;
      cfg.d = s.d;
      cfg.bs = s.bs;
      cfg.lq = s.lq;
      cfg.lk = s.lk;
      cfg.q_range = 3.0f;
      cfg.q_pad = 8;
      double cost = 0;
      for (size_t b = 0; b < cfg.lq.size(); ++b) {
        cost += static_cast<double>(visible_pairs(cfg.lq[b], cfg.lk[b], cfg.causal));
      }
      if (test::kSanitized && cost * static_cast<double>(cfg.heads() * cfg.d) > 3e7) continue;
      run_case(c, seed, cfg, rng);
    }
  }
}

// One sequence of 32k keys read by a few queries (a long prefix hit), packed and paged.
TEST(PrefillAttention, LongContext32k) {
  int c = 2000;
  for (bool paged : {false, true}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      if (test::kSanitized && (dt == DType::kBF16 || !paged)) continue;
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      Config cfg;
      cfg.dt = dt;
      cfg.paged = paged;
      cfg.group = 4;
      cfg.hkv = 2;
      cfg.d = 128;
      cfg.bs = paged ? 16 : 256;
      cfg.lq = {3};
      cfg.lk = {32768};
      cfg.q_range = 3.0f;
      cfg.v_lo = -0.5f;
      cfg.v_hi = 1.5f;
      run_case(c, seed, cfg, rng);
    }
  }
}

}  // namespace
}  // namespace kvattn
