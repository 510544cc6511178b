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
#include "mask_mods_case.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

namespace mm = test::mask_mods;
using mm::Mode;
using mm::Result;
using test::pick;
using test::uniform_int;

struct Config : mm::Options {
  std::string describe() const {
    std::ostringstream os;
    mm::describe_mask(os, *this);
    mm::describe_sizes(os, *this);
    os << " scale " << scale;
    mm::describe_lengths(os, *this);
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

// Runs the op of cfg.mode on fresh random inputs and its float64 reference.
Result run_op(const Config& cfg, std::mt19937_64& rng) {
  mm::Op op = mm::start_op(cfg, rng);
  const auto no_extra = [](auto&) {};
  if (cfg.mode == Mode::kPacked) return mm::run_packed(cfg, op, rng, no_extra);
  const test::PagedKv kv = test::make_paged_kv(rng, cfg.dt, cfg.hkv, cfg.d, cfg.bs, cfg.lk);
  if (cfg.mode == Mode::kPaged) return mm::run_paged(cfg, op, kv, no_extra);
  return mm::run_decode(cfg, op, kv, {}, no_extra);
}

void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng) {
  mm::run_case(c, seed, cfg, rng, "window/softcap", run_op);
}

TEST(WindowSoftcap, RandomCasesMatchFloat64Reference) {
  const int cases = test::case_count(240, 60);  // 120 structured combinations, twice
  mm::run_random_cases(cases, 120, draw_config, run_case);
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
      // Long prefills (>= 256 queries: items of 64 query rows run in blocks of 16 over each
      // key tile; blocks whose window ends before a tile, or starts after it, skip it).
      {Mode::kPaged, true, 40, -1, 30.0f, 16, 0, {300, 260}, {330, 260}},
      {Mode::kPacked, false, 70, 20, 0.0f, 16, 0, {280}, {280}},
      {Mode::kDecode, true, 0, -1, 0.0f, 16, 1, {1, 1, 1}, {0, 1, 1000}},
      {Mode::kDecode, true, 31, -1, 50.0f, 1, 4, {4, 4, 4}, {3, 4, 1000}},
      {Mode::kDecode, false, 5, 2, 1e4f, 256, 3, {3, 3}, {2, 600}},
  };
  int c = 1000;
  for (const Shape& s : shapes) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      ++c;
      mm::run_if_selected(c, [&](uint64_t seed, std::mt19937_64& rng) {
        Config cfg;
        mm::set_shape(s, dt, cfg);
        cfg.group = 4;
        cfg.hkv = 2;
        cfg.d = c % 2 ? 128 : 64;
        run_case(c, seed, cfg, rng);
      });
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
