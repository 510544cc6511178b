// decode_attention against the float64 reference on random adversarial cases (DESIGN §5):
// q_len 1 and > 1 (causal bottom-right), cache_seqlens = 0 rows, batch 1/3/17, pages
// 1/16/256, lengths off the page, GQA 1-8, head_dim 64/128 (and odd ones), strided q/out,
// LSE, f32 and bf16, 32k contexts, key ranges cut into pieces (the same bits on any OpenMP
// team); and batched paged decode == a loop of single-sequence
// decodes == dense float64 attention.
#include "kvattn/kernels/decode_attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "kvattn/kernels/prefill_attention.h"
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
  bool causal = true;
  bool with_lse = true;
  bool use_plan = false;  // pass plan_decode's plan instead of "plan for me"
  int64_t q_len = 1, hkv = 1, group = 1, d = 64, bs = 16;
  float scale = 0.0f;
  float q_range = 1.0f, v_lo = -1.0f, v_hi = 1.0f;
  int64_t q_pad = 0, out_pad = 0;
  std::vector<int64_t> lens;

  int64_t heads() const { return hkv * group; }
  std::string describe() const {
    std::ostringstream os;
    os << dt << (causal ? " causal" : " full") << " B " << lens.size() << " q_len " << q_len
       << " H " << heads() << "/" << hkv << " D " << d << " bs " << bs << " scale " << scale
       << " pads " << q_pad << "/" << out_pad << (with_lse ? " lse" : "")
       << (use_plan ? " plan" : "") << " lens";
    for (int64_t l : lens) os << " " << l;
    return os.str();
  }
};

Config draw_config(int c, std::mt19937_64& rng) {
  Config cfg;
  cfg.dt = c % 2 ? DType::kBF16 : DType::kF32;
  cfg.bs = std::vector<int64_t>{1, 16, 256}[(c / 2) % 3];
  cfg.group = std::vector<int64_t>{1, 2, 4, 8}[(c / 3) % 4];
  const int64_t batch = std::vector<int64_t>{1, 3, 17, uniform_int(rng, 2, 8)}[(c / 5) % 4];
  cfg.q_len = (c / 7) % 3 == 0 ? pick(rng, std::vector<int64_t>{2, 3, 4, 7}) : 1;
  cfg.causal = cfg.q_len == 1 || uniform_int(rng, 0, 3) != 0;
  cfg.hkv = cfg.group == 8 ? pick(rng, std::vector<int64_t>{1, 2})
                           : pick(rng, std::vector<int64_t>{1, 2, 4, 8});
  cfg.d = pick(rng, std::vector<int64_t>{64, 64, 64, 128, 128, 128, 40, 96, 8, 80});
  const double inv = 1.0 / std::sqrt(static_cast<double>(cfg.d));
  cfg.scale = pick(rng, std::vector<float>{0.0f, 0.0f, 0.0f, static_cast<float>(0.5 * inv),
                                           static_cast<float>(2.0 * inv), 1.0f});
  cfg.q_range = pick(rng, std::vector<float>{1.0f, 3.0f});
  if (uniform_int(rng, 0, 1)) {
    cfg.v_lo = -0.5f;
    cfg.v_hi = 1.5f;
  }
  cfg.with_lse = uniform_int(rng, 0, 2) != 0;
  cfg.use_plan = uniform_int(rng, 0, 1) == 1;
  cfg.q_pad = pick(rng, std::vector<int64_t>{0, 0, 5, 64});
  cfg.out_pad = pick(rng, std::vector<int64_t>{0, 0, 7});
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = pick(rng, std::vector<int64_t>{1, 54, 97, 1000, uniform_int(rng, 1, 600),
                                                 uniform_int(rng, 1, 2500)});
    if (uniform_int(rng, 0, 9) == 0) len = 0;                                 // padding row
    if (cfg.q_len > 1 && uniform_int(rng, 0, 9) == 0) len = cfg.q_len - 1;   // rows see nothing
    cfg.lens.push_back(len);
  }
  // Keep the float64 reference cheap: shrink the longest contexts (odd, off the pages).
  const auto cost = [&] {
    double n = 0;
    for (int64_t l : cfg.lens) n += static_cast<double>(l);
    return n * static_cast<double>(cfg.q_len * cfg.heads() * cfg.d);
  };
  while (cost() > 8e6) {
    auto it = std::max_element(cfg.lens.begin(), cfg.lens.end());
    *it = *it > 1 ? ((*it / 2) | 1) : 0;
  }
  return cfg;
}

struct Built {
  test::PagedKv kv;
  test::RowBuffer q, out;
  Tensor lens, lse;
};

Built build(const Config& cfg, std::mt19937_64& rng) {
  Built t;
  const int64_t H = cfg.heads(), rows = static_cast<int64_t>(cfg.lens.size()) * cfg.q_len;
  t.kv = test::make_paged_kv(rng, cfg.dt, cfg.hkv, cfg.d, cfg.bs, cfg.lens, cfg.v_lo, cfg.v_hi);
  t.q = test::make_rows(rows, H, cfg.d, cfg.dt, cfg.q_pad, uniform_int(rng, 0, 3));
  test::fill_random(t.q.view, rng, -cfg.q_range, cfg.q_range);
  t.out = test::make_rows(rows, H, cfg.d, cfg.dt, cfg.out_pad);  // poisoned
  t.lens = test::int_tensor(cfg.lens);
  if (cfg.with_lse) {
    t.lse = Tensor::empty({H, rows}, DType::kF32);
    test::poison(t.lse.view());
  }
  return t;
}

DecodeArgs args_for(const Config& cfg, const Built& t) {
  DecodeArgs a;
  a.q = t.q.view;
  a.k_cache = t.kv.k_cache;
  a.v_cache = t.kv.v_cache;
  a.block_table = t.kv.block_table;
  a.cache_seqlens = t.lens;
  a.q_len = cfg.q_len;
  a.softmax_scale = cfg.scale;
  a.causal = cfg.causal;
  a.out = t.out.view;
  if (cfg.with_lse) a.lse = t.lse.view();
  if (cfg.use_plan) {
    int64_t max_len = 0;
    for (int64_t l : cfg.lens) max_len = std::max(max_len, l);
    a.plan = plan_decode(static_cast<int64_t>(cfg.lens.size()), cfg.heads(), cfg.hkv, cfg.d,
                         cfg.q_len, max_len, Device::cpu());
  }
  return a;
}

double scale_of(const Config& cfg) {
  return cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(cfg.d));
}

void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng) {
  SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
  Built t = build(cfg, rng);
  SCOPED_TRACE(t.kv.layout);
  ASSERT_NO_THROW(decode_attention(args_for(cfg, t)));
  const test::RefAttention ref =
      test::decode_reference(t.q.view, t.kv.k_cache, t.kv.v_cache, t.kv.block_table, t.lens,
                             cfg.q_len, scale_of(cfg), cfg.causal);
  int64_t max_len = 0;
  for (int64_t l : cfg.lens) max_len = std::max(max_len, l);
  std::ostringstream label;
  label << "c" << c << " " << cfg.dt << " B" << cfg.lens.size() << " ql" << cfg.q_len << " H"
        << cfg.heads() << "/" << cfg.hkv << " D" << cfg.d << " bs" << cfg.bs << " maxL"
        << max_len;
  test::expect_attention_close(ref, t.out.view, cfg.with_lse ? t.lse.view() : TensorView(),
                               std::string("decode ") + std::string(dtype_name(cfg.dt)),
                               label.str());
  EXPECT_TRUE(test::untouched_outside(t.out.storage, t.out.view)) << "wrote outside out";
}

TEST(DecodeAttention, PlanOnTheCpuIsOneSplitWithoutWorkspace) {
  const DecodePlan p = plan_decode(64, 32, 8, 128, 1, 4096, Device::cpu());
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.workspace_bytes, 0);
}

TEST(DecodeAttention, RandomCasesMatchFloat64Reference) {
  const int cases = test::case_count(320, 48);
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    run_case(c, seed, draw_config(c, rng), rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(DecodeAttention, PaddingRowsAndShortContexts) {
  struct Shape {
    int64_t q_len, group, d, bs;
    std::vector<int64_t> lens;
  };
  const std::vector<Shape> shapes = {
      {1, 4, 128, 16, {0, 0, 0}},                  // all padding (CUDA-graph replay)
      {1, 1, 64, 16, {0, 54, 0, 97, 1}},           // padding between live rows
      {4, 2, 64, 16, {2, 0, 4, 5, 17}},            // q_len > keys: leading rows see nothing
      {3, 8, 64, 1, {1, 2, 3, 1000}},              // page size 1
      {1, 2, 128, 256, {255, 256, 257, 513}},      // around page boundaries
      {2, 1, 64, 256, std::vector<int64_t>(17, 97)},
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
      cfg.q_len = s.q_len;
      cfg.group = s.group;
      cfg.hkv = 2;
      cfg.d = s.d;
      cfg.bs = s.bs;
      cfg.lens = s.lens;
      cfg.q_range = 3.0f;
      cfg.q_pad = 16;
      cfg.out_pad = 3;
      run_case(c, seed, cfg, rng);
    }
  }
}

TEST(DecodeAttention, LongContext32k) {
  int c = 2000;
  for (int64_t bs : {16, 256}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      if (test::kSanitized && (dt == DType::kBF16 || bs == 256)) continue;
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      Config cfg;
      cfg.dt = dt;
      cfg.group = 4;
      cfg.hkv = 2;
      cfg.d = 128;
      cfg.bs = bs;
      cfg.q_len = bs == 16 ? 1 : 2;
      cfg.lens = bs == 16 ? std::vector<int64_t>{32768} : std::vector<int64_t>{32771, 5, 0};
      cfg.q_range = 3.0f;
      cfg.v_lo = -0.5f;
      cfg.v_hi = 1.5f;
      run_case(c, seed, cfg, rng);
    }
  }
}

// Few items with long key ranges are cut into pieces of their keys and merged
// (src/kernels/cpu/attention_work_plan.h). The cut depends on the shape only, so the output
// and LSE are the same bits for any OpenMP team, and they match the float64 reference.
TEST(DecodeAttention, CutKeyRangesGiveTheSameBitsOnAnyTeam) {
  struct Shape {
    int64_t q_len, hkv, group, d, bs;
    std::vector<int64_t> lens;
  };
  const std::vector<Shape> shapes = {
      {1, 3, 3, 64, 16, {8191}},            // SmolLM2's heads, one sequence
      {3, 2, 4, 128, 1, {4999, 0, 2}},      // q_len 3, a padding row, page 1
      {1, 1, 8, 64, 256, {3000, 700, 1}},   // one KV head, ragged
  };
  const int before = omp_get_max_threads();
  int c = 3000;
  for (const Shape& s : shapes) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      Config cfg;
      cfg.dt = dt;
      cfg.q_len = s.q_len;
      cfg.hkv = s.hkv;
      cfg.group = s.group;
      cfg.d = s.d;
      cfg.bs = s.bs;
      cfg.lens = s.lens;
      cfg.q_range = 3.0f;
      SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
      Built t = build(cfg, rng);
      std::vector<std::vector<uint8_t>> outs, lses;
      for (int team : {1, 2, 3}) {
        omp_set_num_threads(team);
        test::poison(t.out.view);
        test::poison(t.lse.view());
        ASSERT_NO_THROW(decode_attention(args_for(cfg, t))) << "team " << team;
        const auto* o = static_cast<const uint8_t*>(t.out.storage.data());
        const auto* l = static_cast<const uint8_t*>(t.lse.data());
        outs.emplace_back(o, o + t.out.storage.nbytes());
        lses.emplace_back(l, l + t.lse.nbytes());
      }
      omp_set_num_threads(before);
      EXPECT_TRUE(outs[1] == outs[0] && outs[2] == outs[0]) << "output differs between teams";
      EXPECT_TRUE(lses[1] == lses[0] && lses[2] == lses[0]) << "LSE differs between teams";
      const test::RefAttention ref =
          test::decode_reference(t.q.view, t.kv.k_cache, t.kv.v_cache, t.kv.block_table,
                                 t.lens, cfg.q_len, scale_of(cfg), cfg.causal);
      test::expect_attention_close(ref, t.out.view, t.lse.view(),
                                   std::string("decode ") + std::string(dtype_name(cfg.dt)),
                                   "cut " + std::to_string(c));
    }
  }
}

// Batched paged decode == a loop of single-sequence decodes (each with its own block-table
// row and q rows) == dense float64 attention over K/V copied out of the cache, and == packed
// prefill_attention over those dense K/V (a second implementation path).
TEST(DecodeAttention, BatchedEqualsLoopOfSinglesEqualsDense) {
  const int cases = test::case_count(24, 6);
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    Config cfg;
    cfg.dt = c % 2 ? DType::kBF16 : DType::kF32;
    cfg.q_len = (c / 2) % 3 == 2 ? 3 : 1;
    cfg.group = std::vector<int64_t>{1, 2, 4, 8}[(c / 2) % 4];
    cfg.hkv = 2;
    cfg.d = pick(rng, std::vector<int64_t>{64, 128});
    cfg.bs = std::vector<int64_t>{1, 16, 256}[c % 3];
    cfg.q_range = 3.0f;
    cfg.with_lse = true;
    const int64_t batch = pick(rng, std::vector<int64_t>{3, 5, 17});
    for (int64_t b = 0; b < batch; ++b) {
      cfg.lens.push_back(uniform_int(rng, 0, 9) == 0 ? 0 : uniform_int(rng, 1, 700));
    }
    SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
    Built t = build(cfg, rng);
    ASSERT_NO_THROW(decode_attention(args_for(cfg, t)));

    const int64_t H = cfg.heads(), D = cfg.d, B = batch, ql = cfg.q_len;
    // The loop of singles.
    test::RowBuffer single_out = test::make_rows(B * ql, H, D, cfg.dt, 0);
    Tensor single_lse = Tensor::empty({H, B * ql}, DType::kF32);
    for (int64_t b = 0; b < B; ++b) {
      Tensor len = test::int_tensor({cfg.lens[b]});
      Tensor lse_b = Tensor::empty({H, ql}, DType::kF32);
      DecodeArgs a;
      a.q = t.q.view.slice0(b * ql, (b + 1) * ql);
      a.k_cache = t.kv.k_cache;
      a.v_cache = t.kv.v_cache;
      a.block_table = t.kv.block_table.slice0(b, b + 1);
      a.cache_seqlens = len;
      a.q_len = ql;
      a.causal = cfg.causal;
      a.out = single_out.view.slice0(b * ql, (b + 1) * ql);
      a.lse = lse_b;
      ASSERT_NO_THROW(decode_attention(a)) << "sequence " << b;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < ql; ++i) {
          single_lse.ptr<float>()[h * B * ql + b * ql + i] = lse_b.ptr<float>()[h * ql + i];
        }
      }
    }
    const test::ErrorStats batch_vs_loop =
        test::compare(test::to_doubles(t.out.view), test::to_doubles(single_out.view));
    EXPECT_FALSE(batch_vs_loop.has_nan);
    EXPECT_LE(batch_vs_loop.rel_l2, cfg.dt == DType::kF32 ? 1e-6 : 1e-2)
        << "batched decode differs from the loop of single decodes, max abs "
        << batch_vs_loop.max_abs;
    const test::LseStats lse_vs_loop =
        test::compare_lse(test::to_doubles(t.lse.view()), test::to_doubles(single_lse.view()));
    EXPECT_TRUE(lse_vs_loop.ok);
    EXPECT_LE(lse_vs_loop.max_abs, 1e-5);

    // Dense K/V: each sequence's keys copied out of the cache into packed rows.
    std::vector<int64_t> cu_q(1, 0), cu_k(1, 0);
    for (int64_t b = 0; b < B; ++b) {
      cu_q.push_back(cu_q.back() + ql);
      cu_k.push_back(cu_k.back() + cfg.lens[b]);
    }
    const int64_t es = dtype_size(cfg.dt), row = cfg.hkv * D;
    Tensor dk = Tensor::empty({cu_k.back(), cfg.hkv, D}, cfg.dt);
    Tensor dv = Tensor::empty({cu_k.back(), cfg.hkv, D}, cfg.dt);
    const auto table = test::to_int64s(t.kv.block_table);
    const int64_t width = t.kv.block_table.size(1);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < cfg.lens[b]; ++j) {
        const int64_t blk = table[b * width + j / cfg.bs], off = j % cfg.bs;
        const auto src = [&](const TensorView& cache) {
          return static_cast<const char*>(cache.data) +
                 (blk * cache.stride(0) + off * cache.stride(1)) * es;
        };
        std::memcpy(static_cast<char*>(dk.data()) + (cu_k[b] + j) * row * es,
                    src(t.kv.k_cache), row * es);
        std::memcpy(static_cast<char*>(dv.data()) + (cu_k[b] + j) * row * es,
                    src(t.kv.v_cache), row * es);
      }
    }
    const test::RefAttention dense = test::prefill_reference(t.q.view, dk, dv, cu_q, cu_k,
                                                             scale_of(cfg), cfg.causal);
    test::expect_attention_close(dense, t.out.view, t.lse.view(),
                                 std::string("decode batched vs dense ") +
                                     std::string(dtype_name(cfg.dt)),
                                 "batched c" + std::to_string(c));
    test::expect_attention_close(dense, single_out.view, single_lse.view(),
                                 std::string("decode single vs dense ") +
                                     std::string(dtype_name(cfg.dt)),
                                 "singles c" + std::to_string(c));
    // Packed prefill over the dense K/V computes the same thing.
    test::RowBuffer pre_out = test::make_rows(B * ql, H, D, cfg.dt, 0);
    Tensor cu_q_t = test::int_tensor(cu_q), cu_k_t = test::int_tensor(cu_k);
    PrefillArgs p;
    p.q = t.q.view;
    p.k = dk;
    p.v = dv;
    p.cu_seqlens_q = cu_q_t;
    p.cu_seqlens_k = cu_k_t;
    p.max_seqlen_q = ql;
    p.causal = cfg.causal;
    p.out = pre_out.view;
    ASSERT_NO_THROW(prefill_attention(p));
    const test::ErrorStats vs_prefill =
        test::compare(test::to_doubles(t.out.view), test::to_doubles(pre_out.view));
    EXPECT_LE(vs_prefill.rel_l2, cfg.dt == DType::kF32 ? 1e-6 : 1e-2)
        << "decode and packed prefill disagree, max abs " << vs_prefill.max_abs;
  }
}

}  // namespace
}  // namespace kvattn
