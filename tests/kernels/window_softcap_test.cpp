// Sliding window (flash-attn's window_size) and softcap in prefill (packed and paged) and
// decode against the float64 reference: window x causal x GQA x packed/paged/decode x page
// sizes 1/16/256 x head_dim 64/128 x softcap on/off, with adversarial windows (0, larger
// than Lk, right-only) and lengths (Lq > Lk, rows that see nothing); a decode reads no key
// before its window; the defaults keep the unwindowed results bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::pick;
using test::uniform_int;

enum class Mode { kPacked, kPaged, kDecode };

struct Config {
  Mode mode = Mode::kPacked;
  DType dt = DType::kF32;
  bool causal = true;
  int64_t left = -1, right = -1;
  float softcap = 0.0f;
  int64_t hkv = 2, group = 1, d = 64, bs = 16, q_len = 1;  // q_len: decode only
  float scale = 0.0f;
  std::vector<int64_t> lq, lk;  // decode: lq[b] == q_len

  int64_t heads() const { return hkv * group; }
  std::string describe() const {
    std::ostringstream os;
    os << (mode == Mode::kPacked ? "packed" : mode == Mode::kPaged ? "paged" : "decode") << " "
       << dt << (causal ? " causal" : " full") << " window (" << left << ", " << right
       << ") softcap " << softcap << " H " << heads() << "/" << hkv << " D " << d << " bs "
       << bs << " scale " << scale << " lq/lk";
    for (size_t b = 0; b < lq.size(); ++b) os << " " << lq[b] << "/" << lk[b];
    return os.str();
  }
};

// Case c fixes the structured part (mode, causal, softcap, head_dim, window kind); rng the rest.
Config draw_config(int c, std::mt19937_64& rng) {
  Config cfg;
  cfg.mode = static_cast<Mode>(c % 3);
  cfg.causal = (c / 3) % 2 == 0;
  cfg.softcap = (c / 6) % 2 ? pick(rng, std::vector<float>{0.5f, 5.0f, 30.0f}) : 0.0f;
  cfg.d = (c / 12) % 2 ? 128 : 64;
  const int window_kind = (c / 24) % 5;
  cfg.dt = uniform_int(rng, 0, 3) == 0 ? DType::kBF16 : DType::kF32;
  cfg.bs = pick(rng, std::vector<int64_t>{1, 16, 256});
  cfg.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 8});
  cfg.hkv = cfg.group == 8 ? 1 : pick(rng, std::vector<int64_t>{1, 2});
  cfg.scale = pick(rng, std::vector<float>{0.0f, 0.0f, 1.0f});  // 1.0: large scores to cap
  const int64_t batch = pick(rng, std::vector<int64_t>{1, 3, uniform_int(rng, 2, 4)});
  cfg.q_len = cfg.mode == Mode::kDecode ? pick(rng, std::vector<int64_t>{1, 1, 3, 7}) : 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t lk = pick(rng, std::vector<int64_t>{1, 54, 97, uniform_int(rng, 0, 300)});
    int64_t lq = cfg.mode == Mode::kDecode ? cfg.q_len : uniform_int(rng, 0, std::min<int64_t>(lk + 20, 64));
    if (uniform_int(rng, 0, 7) == 0) lk = std::max<int64_t>(0, lq - uniform_int(rng, 1, 5));  // Lq > Lk
    cfg.lq.push_back(lq);
    cfg.lk.push_back(lk);
  }
  const int64_t w = pick(rng, std::vector<int64_t>{0, 1, 7, 16, 63, uniform_int(rng, 0, 400)});
  switch (window_kind) {
    case 0: cfg.left = w; cfg.right = -1; break;                       // left only
    case 1: cfg.left = w; cfg.right = uniform_int(rng, 0, 20); break;  // both sides
    case 2: cfg.left = -1; cfg.right = uniform_int(rng, 0, 20); break; // right only
    case 3: cfg.left = 0; cfg.right = 0; break;                        // the diagonal only
    default: cfg.left = 1000; cfg.right = 1000; break;                 // wider than Lk
  }
  return cfg;
}

struct Result {
  test::RowBuffer out;
  Tensor lse;
  test::RefAttention ref;
};

test::RefMask mask_of(const Config& cfg) {
  return {cfg.left, cfg.right, static_cast<double>(cfg.softcap)};
}

double scale_of(const Config& cfg) {
  return cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(cfg.d));
}

// The fields PrefillArgs and DecodeArgs share: scale, causal, window, softcap, out and lse.
template <typename Args>
void set_mask_and_outputs(const Config& cfg, Result& r, Args& a) {
  a.softmax_scale = cfg.scale;
  a.causal = cfg.causal;
  a.window_left = cfg.left;
  a.window_right = cfg.right;
  a.softcap = cfg.softcap;
  a.out = r.out.view;
  a.lse = r.lse.view();
}

// Runs the op of cfg.mode on fresh random inputs and its float64 reference.
Result run_op(const Config& cfg, std::mt19937_64& rng) {
  const int64_t H = cfg.heads(), D = cfg.d;
  std::vector<int64_t> cu_q(1, 0), cu_k(1, 0);
  for (size_t b = 0; b < cfg.lq.size(); ++b) {
    cu_q.push_back(cu_q.back() + cfg.lq[b]);
    cu_k.push_back(cu_k.back() + cfg.lk[b]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  test::RowBuffer qb = test::make_rows(total_q, H, D, cfg.dt, uniform_int(rng, 0, 1) * 5);
  test::fill_random(qb.view, rng, -2.0f, 2.0f);
  Result r;
  r.out = test::make_rows(total_q, H, D, cfg.dt, 0);  // poisoned
  r.lse = Tensor::empty({H, total_q}, DType::kF32);
  test::poison(r.lse.view());
  const test::RefMask mask = mask_of(cfg);
  const double scale = scale_of(cfg);

  if (cfg.mode == Mode::kPacked) {
    test::RowBuffer kb = test::make_rows(total_k, cfg.hkv, D, cfg.dt, 3);
    test::RowBuffer vb = test::make_rows(total_k, cfg.hkv, D, cfg.dt, 0);
    test::fill_random(kb.view, rng, -1.0f, 1.0f);
    test::fill_random(vb.view, rng, -1.0f, 1.0f);
    Tensor cu_q_t = test::int_tensor(cu_q), cu_k_t = test::int_tensor(cu_k);
    PrefillArgs a;
    a.q = qb.view;
    a.k = kb.view;
    a.v = vb.view;
    a.cu_seqlens_q = cu_q_t;
    a.cu_seqlens_k = cu_k_t;
    set_mask_and_outputs(cfg, r, a);
    EXPECT_NO_THROW(prefill_attention(a));
    r.ref = test::prefill_reference(qb.view, kb.view, vb.view, cu_q, cu_k, scale, cfg.causal,
                                    mask);
    return r;
  }
  test::PagedKv kv = test::make_paged_kv(rng, cfg.dt, cfg.hkv, D, cfg.bs, cfg.lk);
  if (cfg.mode == Mode::kPaged) {
    Tensor cu_q_t = test::int_tensor(cu_q), cu_k_t = test::int_tensor(cu_k);
    PrefillArgs a;
    a.q = qb.view;
    a.k = kv.k_cache;
    a.v = kv.v_cache;
    a.block_table = kv.block_table;
    a.cu_seqlens_q = cu_q_t;
    a.cu_seqlens_k = cu_k_t;
    set_mask_and_outputs(cfg, r, a);
    EXPECT_NO_THROW(prefill_attention(a));
    r.ref = test::paged_prefill_reference(qb.view, kv.k_cache, kv.v_cache, kv.block_table, cu_q,
                                          cu_k, scale, cfg.causal, mask);
    return r;
  }
  Tensor lens = test::int_tensor(cfg.lk);
  DecodeArgs a;
  a.q = qb.view;
  a.k_cache = kv.k_cache;
  a.v_cache = kv.v_cache;
  a.block_table = kv.block_table;
  a.cache_seqlens = lens;
  a.q_len = cfg.q_len;
  set_mask_and_outputs(cfg, r, a);
  EXPECT_NO_THROW(decode_attention(a));
  r.ref = test::decode_reference(qb.view, kv.k_cache, kv.v_cache, kv.block_table, lens,
                                 cfg.q_len, scale, cfg.causal, mask);
  return r;
}

void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng) {
  SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
  Result r = run_op(cfg, rng);
  if (::testing::Test::HasFailure()) return;
  std::ostringstream label;
  label << "c" << c << " " << cfg.describe();
  const std::string key = std::string(cfg.mode == Mode::kDecode ? "decode " : "prefill ") +
                          "window/softcap " + std::string(dtype_name(cfg.dt));
  test::expect_attention_close(r.ref, r.out.view, r.lse.view(), key, label.str());
  EXPECT_TRUE(test::untouched_outside(r.out.storage, r.out.view)) << "wrote outside out";
}

TEST(WindowSoftcap, RandomCasesMatchFloat64Reference) {
  const int cases = test::case_count(240, 60);  // 120 structured combinations, twice
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    run_case(c, seed, draw_config(c % 120, rng), rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Hand-picked edges: window 0 (the diagonal), window wider than Lk, Lq > Lk with a window
// (leading rows see nothing), a right-only window past the end, softcap tiny and huge.
TEST(WindowSoftcap, AdversarialShapes) {
  struct Shape {
    Mode mode;
    bool causal;
    int64_t left, right;
    float softcap;
    int64_t bs, q_len;
    std::vector<int64_t> lq, lk;
  };
  const std::vector<Shape> shapes = {
      {Mode::kPacked, true, 0, -1, 0.0f, 16, 0, {5, 1, 9}, {5, 1, 20}},
      {Mode::kPacked, false, 0, 0, 0.0f, 16, 0, {12, 3}, {12, 40}},
      {Mode::kPaged, true, 5000, -1, 0.0f, 1, 0, {30, 7}, {97, 7}},
      {Mode::kPaged, true, 3, -1, 2.0f, 16, 0, {20, 9}, {6, 2}},       // Lq > Lk
      {Mode::kPacked, false, 2, 1, 0.0f, 16, 0, {25}, {4}},            // Lq > Lk, not causal
      {Mode::kPacked, false, -1, 0, 0.0f, 16, 0, {10}, {3}},           // right-only, Lq > Lk
      {Mode::kPaged, false, 10, 50, 1e-3f, 256, 0, {40}, {300}},
      {Mode::kDecode, true, 0, -1, 0.0f, 16, 1, {1, 1, 1}, {0, 1, 1000}},
      {Mode::kDecode, true, 31, -1, 50.0f, 1, 4, {4, 4, 4}, {3, 4, 1000}},
      {Mode::kDecode, false, 5, 2, 1e4f, 256, 3, {3, 3}, {2, 600}},
  };
  int c = 1000;
  for (const Shape& s : shapes) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      Config cfg;
      cfg.mode = s.mode;
      cfg.dt = dt;
      cfg.causal = s.causal;
      cfg.left = s.left;
      cfg.right = s.right;
      cfg.softcap = s.softcap;
      cfg.bs = s.bs;
      cfg.q_len = s.q_len;
      cfg.group = 4;
      cfg.hkv = 2;
      cfg.d = c % 2 ? 128 : 64;
      cfg.lq = s.lq;
      cfg.lk = s.lk;
      run_case(c, seed, cfg, rng);
    }
  }
}

// Defaults (window (-1, -1), softcap 0) and a window wider than every sequence give exactly
// the unwindowed result: the options cost nothing when they change nothing.
TEST(WindowSoftcap, WideWindowEqualsNoWindowBitForBit) {
  const uint64_t seed = test::case_seed();
  SCOPED_TRACE(test::case_note(0, seed, "wide window"));
  for (Mode mode : {Mode::kPacked, Mode::kPaged, Mode::kDecode}) {
    Config cfg;
    cfg.mode = mode;
    cfg.group = 2;
    cfg.q_len = mode == Mode::kDecode ? 2 : 0;
    cfg.lq = mode == Mode::kDecode ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{33, 70};
    cfg.lk = {180, 70};
    std::mt19937_64 rng_a(seed), rng_b(seed);
    Result plain = run_op(cfg, rng_a);
    cfg.left = 180;
    cfg.right = 180;
    Result wide = run_op(cfg, rng_b);
    ASSERT_EQ(plain.out.view.nbytes(), wide.out.view.nbytes());
    EXPECT_EQ(test::bytes_of(plain.out.storage), test::bytes_of(wide.out.storage));
    EXPECT_EQ(test::bytes_of(plain.lse), test::bytes_of(wide.lse));
  }
}

// A windowed decode reads only the window: every cache block that lies wholly before the
// window holds NaN, and the output still matches the reference (which never looks there).
TEST(WindowSoftcap, DecodeSkipsBlocksBeforeTheWindow) {
  for (int64_t bs : {1, 16, 256}) {
    const uint64_t seed = test::case_seed();
    SCOPED_TRACE(test::case_note(static_cast<int>(bs), seed, "decode window skip"));
    std::mt19937_64 rng(seed);
    const int64_t L = 3000, q_len = 2, left = 100, hkv = 2, H = 8, D = 64;
    test::PagedKv kv = test::make_paged_kv(rng, DType::kF32, hkv, D, bs, {L});
    const int64_t first_seen = L - q_len - left;  // row 0's first key
    const auto table = test::to_int64s(kv.block_table);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t blk = 0; (blk + 1) * bs <= first_seen; ++blk) {
      for (const TensorView& cache : {kv.k_cache, kv.v_cache}) {
        float* p = cache.ptr<float>() + table[blk] * cache.stride(0);
        std::fill(p, p + bs * hkv * D, nan);
      }
    }
    test::RowBuffer qb = test::make_rows(q_len, H, D, DType::kF32, 0);
    test::fill_random(qb.view, rng);
    test::RowBuffer out = test::make_rows(q_len, H, D, DType::kF32, 0);
    Tensor lse = Tensor::empty({H, q_len}, DType::kF32);
    Tensor lens = test::int_tensor({L});
    DecodeArgs a;
    a.q = qb.view;
    a.k_cache = kv.k_cache;
    a.v_cache = kv.v_cache;
    a.block_table = kv.block_table;
    a.cache_seqlens = lens;
    a.q_len = q_len;
    a.window_left = left;
    a.out = out.view;
    a.lse = lse.view();
    ASSERT_NO_THROW(decode_attention(a));
    const test::RefAttention ref =
        test::decode_reference(qb.view, kv.k_cache, kv.v_cache, kv.block_table, lens, q_len,
                               1.0 / std::sqrt(static_cast<double>(D)), true, {left, -1, 0.0});
    test::expect_attention_close(ref, out.view, lse.view(), "decode window skip",
                                 "bs " + std::to_string(bs));
  }
}

}  // namespace
}  // namespace kvattn
