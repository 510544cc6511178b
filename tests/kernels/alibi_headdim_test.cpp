// ALiBi (flash-attn's alibi_slopes), a decode's cache_leftpad and head_dim 64/80/96/128/256 in
// prefill (packed and paged), decode and store_kv against the float64 reference: ALiBi [H] and
// [B, H] x causal x window x softcap x GQA 1..8 (3 and 6 included) x pages 1/16/48 x head_dim,
// with Lq > Lk, Lk = 0 and windows longer or shorter than the sequence; a leftpadded decode
// never reads the positions before its pad.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"
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

enum class Alibi { kNone, kPerHead, kPerSeq };

struct Config : mm::Options {
  Alibi alibi = Alibi::kPerHead;
  bool leftpad = false;  // decode only; lk (cache_seqlens) includes the pad

  std::string describe() const {
    std::ostringstream os;
    mm::describe_mask(os, *this);
    os << " alibi "
       << (alibi == Alibi::kNone ? "none" : alibi == Alibi::kPerHead ? "[H]" : "[B,H]")
       << (leftpad ? " leftpad" : "");
    mm::describe_sizes(os, *this);
    mm::describe_lengths(os, *this);
    return os.str();
  }
};

// Case c fixes mode, causal, ALiBi form and head_dim; rng draws the rest.
Config draw_config(int c, std::mt19937_64& rng) {
  Config cfg;
  cfg.mode = static_cast<Mode>(c % 3);
  cfg.causal = (c / 3) % 2 == 0;
  cfg.alibi = (c / 6) % 2 ? Alibi::kPerSeq : Alibi::kPerHead;
  cfg.d = std::vector<int64_t>{64, 80, 96, 128, 256}[(c / 12) % 5];
  cfg.leftpad = cfg.mode == Mode::kDecode && uniform_int(rng, 0, 1) == 1;
  cfg.dt = uniform_int(rng, 0, 3) == 0 ? DType::kBF16 : DType::kF32;
  cfg.bs = pick(rng, std::vector<int64_t>{1, 16, 48});
  cfg.group = pick(rng, std::vector<int64_t>{1, 2, 3, 4, 6, 8});
  cfg.hkv = cfg.group >= 6 ? 1 : pick(rng, std::vector<int64_t>{1, 2});
  cfg.softcap = uniform_int(rng, 0, 2) == 0 ? pick(rng, std::vector<float>{1.0f, 20.0f}) : 0.0f;
  cfg.scale = pick(rng, std::vector<float>{0.0f, 0.0f, 0.5f});
  const int64_t batch = pick(rng, std::vector<int64_t>{1, 3, uniform_int(rng, 2, 4)});
  cfg.q_len = cfg.mode == Mode::kDecode ? pick(rng, std::vector<int64_t>{1, 1, 3}) : 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t lk = pick(rng, std::vector<int64_t>{1, 54, 97, uniform_int(rng, 0, 200)});
    const int64_t lq = cfg.mode == Mode::kDecode
                           ? cfg.q_len
                           : uniform_int(rng, 0, std::min<int64_t>(lk + 20, 40));
    if (uniform_int(rng, 0, 7) == 0) lk = std::max<int64_t>(0, lq - uniform_int(rng, 1, 5));
    cfg.lq.push_back(lq);
    cfg.lk.push_back(lk);
  }
  switch (uniform_int(rng, 0, 3)) {
    case 0: break;                                                          // no window
    case 1: cfg.left = pick(rng, std::vector<int64_t>{0, 5, 40}); break;    // shorter
    case 2: cfg.left = 1000; cfg.right = 1000; break;                       // longer
    default: cfg.left = uniform_int(rng, 0, 30); cfg.right = uniform_int(rng, 0, 10); break;
  }
  return cfg;
}

// Slopes as ALiBi models draw them (2^(-8h/H)) or random, some zero or negative.
std::vector<float> draw_slopes(std::mt19937_64& rng, int64_t n, int64_t heads) {
  std::vector<float> s(static_cast<size_t>(n));
  const bool geometric = uniform_int(rng, 0, 1) == 0;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = geometric ? std::exp2(-8.0f * static_cast<float>(i % heads + 1) / heads)
                     : std::uniform_real_distribution<float>(-0.1f, 1.0f)(rng);
  }
  if (uniform_int(rng, 0, 3) == 0) s[0] = 0.0f;
  return s;
}

// Writes NaN into the cache slots of positions [0, pad) of each sequence (except slots that
// another sequence's keys share: make_paged_kv shares prefix blocks): a decode that reads
// before its leftpad then shows NaN.
void poison_before_pad(const test::PagedKv& kv, const std::vector<int64_t>& pads,
                       const std::vector<int64_t>& lens) {
  const auto table = test::to_int64s(kv.block_table);
  const int64_t width = kv.block_table.shape[1], bs = kv.k_cache.shape[1];
  const int64_t row = kv.k_cache.shape[2] * kv.k_cache.shape[3];
  const int64_t es = dtype_size(kv.k_cache.dtype);
  std::set<int64_t> live;  // slots some sequence reads
  for (size_t b = 0; b < pads.size(); ++b) {
    for (int64_t pos = pads[b]; pos < lens[b]; ++pos) {
      live.insert(table[b * width + pos / bs] * bs + pos % bs);
    }
  }
  for (size_t b = 0; b < pads.size(); ++b) {
    for (int64_t pos = 0; pos < pads[b]; ++pos) {
      const int64_t block = table[b * width + pos / bs];
      if (live.count(block * bs + pos % bs) != 0) continue;
      for (const TensorView& c : {kv.k_cache, kv.v_cache}) {
        char* p = static_cast<char*>(c.data) + (block * c.stride(0) + (pos % bs) * row) * es;
        std::memset(p, 0xFF, static_cast<size_t>(row * es));  // NaN in f32 and bf16
      }
    }
  }
}

// Draws cfg's slopes ([H] or [B, H]) into a tensor for the op and into op's reference mask.
Tensor add_slopes(const Config& cfg, mm::Op& op, std::mt19937_64& rng) {
  const int64_t H = cfg.heads(), B = static_cast<int64_t>(cfg.lq.size());
  const bool per_seq = cfg.alibi == Alibi::kPerSeq;
  const std::vector<float> s = draw_slopes(rng, per_seq ? B * H : H, H);
  Tensor slopes = per_seq ? Tensor::empty({B, H}, DType::kF32) : Tensor::empty({H}, DType::kF32);
  std::copy(s.begin(), s.end(), slopes.ptr<float>());
  op.mask.alibi.assign(s.begin(), s.end());
  op.mask.alibi_per_seq = per_seq;
  return slopes;
}

// Each sequence's leftpad (0, all of it or random) with the cache before it poisoned; all 0
// without cfg.leftpad.
std::vector<int64_t> draw_pads(const Config& cfg, const test::PagedKv& kv,
                               std::mt19937_64& rng) {
  std::vector<int64_t> pads(cfg.lq.size(), 0);
  if (!cfg.leftpad) return pads;
  for (size_t b = 0; b < pads.size(); ++b) {
    pads[b] = pick(rng, std::vector<int64_t>{0, cfg.lk[b], uniform_int(rng, 0, cfg.lk[b])});
  }
  poison_before_pad(kv, pads, cfg.lk);
  return pads;
}

// Runs the op of cfg.mode on fresh random inputs and its float64 reference.
Result run_op(const Config& cfg, std::mt19937_64& rng) {
  mm::Op op = mm::start_op(cfg, rng);
  Tensor slopes;
  if (cfg.alibi != Alibi::kNone) slopes = add_slopes(cfg, op, rng);
  const auto set_slopes = [&](auto& a) {
    if (cfg.alibi != Alibi::kNone) a.alibi_slopes = slopes.view();
  };
  if (cfg.mode == Mode::kPacked) return mm::run_packed(cfg, op, rng, set_slopes);
  const test::PagedKv kv = test::make_paged_kv(rng, cfg.dt, cfg.hkv, cfg.d, cfg.bs, cfg.lk);
  if (cfg.mode == Mode::kPaged) return mm::run_paged(cfg, op, kv, set_slopes);
  const std::vector<int64_t> pads = draw_pads(cfg, kv, rng);
  Tensor pad_t = test::int_tensor(pads);
  return mm::run_decode(cfg, op, kv, pads, [&](DecodeArgs& a) {
    set_slopes(a);
    if (cfg.leftpad) a.cache_leftpad = pad_t;
  });
}

void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng) {
  mm::run_case(c, seed, cfg, rng, "alibi/head_dim", run_op);
}

TEST(Alibi, RandomCasesMatchFloat64Reference) {
  const int cases = test::case_count(120, 30);  // 60 structured combinations, twice
  mm::run_random_cases(cases, 60, draw_config, run_case);
}

// Hand-picked edges, each with ALiBi [H] and [B, H] and f32/bf16.
TEST(Alibi, AdversarialShapes) {
  struct Shape {
    Mode mode;
    bool causal;
    int64_t left, right;
    float softcap;
    int64_t group, d, bs, q_len;
    bool leftpad;
    std::vector<int64_t> lq, lk;
  };
  const std::vector<Shape> shapes = {
      {Mode::kPacked, false, -1, -1, 0.0f, 3, 80, 16, 0, false, {25, 4}, {4, 30}},  // Lq > Lk
      {Mode::kPacked, true, -1, -1, 0.0f, 6, 96, 16, 0, false, {9, 0, 5}, {0, 7, 5}},  // Lk = 0
      {Mode::kPaged, true, 3, -1, 5.0f, 8, 256, 1, 0, false, {20, 9}, {6, 2}},
      {Mode::kPaged, false, 2000, 2000, 0.0f, 2, 80, 48, 0, false, {40, 1}, {300, 97}},
      {Mode::kPaged, false, 0, 0, 0.0f, 1, 96, 48, 0, false, {12}, {12}},
      {Mode::kDecode, true, -1, -1, 0.0f, 4, 256, 16, 1, true, {1, 1, 1}, {0, 1, 1000}},
      {Mode::kDecode, true, 31, -1, 50.0f, 3, 80, 48, 4, true, {4, 4, 4}, {4, 40, 500}},
      {Mode::kDecode, false, 5, 2, 0.0f, 6, 96, 1, 3, false, {3, 3}, {2, 600}},
  };
  int c = 1000;
  for (const Shape& s : shapes) {
    for (Alibi alibi : {Alibi::kPerHead, Alibi::kPerSeq}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        ++c;
        mm::run_if_selected(c, [&](uint64_t seed, std::mt19937_64& rng) {
          Config cfg;
          mm::set_shape(s, dt, cfg);
          cfg.alibi = alibi;
          cfg.leftpad = s.leftpad;
          cfg.group = s.group;
          cfg.hkv = s.group >= 6 ? 1 : 2;
          cfg.d = s.d;
          run_case(c, seed, cfg, rng);
        });
      }
    }
  }
}

// A hand-worked case: one query, three keys with equal scores and unit values; slope 1 and
// causal => weights e^-2, e^-1, e^0 on keys 0, 1, 2 (bias -|2 - j|).
TEST(Alibi, HandWorkedBias) {
  Tensor q = Tensor::zeros({1, 1, 64}, DType::kF32);
  Tensor k = Tensor::zeros({3, 1, 64}, DType::kF32);
  Tensor v = Tensor::zeros({3, 1, 64}, DType::kF32);
  for (int j = 0; j < 3; ++j) v.ptr<float>()[j * 64] = static_cast<float>(j);  // v[j][0] = j
  Tensor out = Tensor::empty({1, 1, 64}, DType::kF32);
  Tensor lse = Tensor::empty({1, 1}, DType::kF32);
  Tensor slopes = Tensor::empty({1}, DType::kF32);
  slopes.ptr<float>()[0] = 1.0f;
  Tensor cu_q = test::int_tensor({0, 1}), cu_k = test::int_tensor({0, 3});
  PrefillArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  a.alibi_slopes = slopes;
  a.out = out;
  a.lse = lse;
  ASSERT_NO_THROW(prefill_attention(a));
  const double w0 = std::exp(-2.0), w1 = std::exp(-1.0), w2 = 1.0, sum = w0 + w1 + w2;
  EXPECT_NEAR(out.ptr<float>()[0], (w1 + 2 * w2) / sum, 1e-6);
  EXPECT_NEAR(lse.ptr<float>()[0], std::log(sum), 1e-6);
}

// head_dim 80, 96 and 256 next to 64 and 128 without any option: packed, paged and decode
// (f32 and bf16) against the reference, and store_kv bit for bit.
TEST(HeadDims, PlainAttentionAndStoreKv) {
  int c = 2000;
  for (int64_t d : {64, 80, 96, 128, 256}) {
    for (Mode mode : {Mode::kPacked, Mode::kPaged, Mode::kDecode}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        ++c;
        mm::run_if_selected(c, [&](uint64_t seed, std::mt19937_64& rng) {
          Config cfg;
          cfg.mode = mode;
          cfg.dt = dt;
          cfg.alibi = Alibi::kNone;
          cfg.d = d;
          cfg.group = pick(rng, std::vector<int64_t>{1, 3, 4});
          cfg.bs = pick(rng, std::vector<int64_t>{1, 16, 48});
          cfg.q_len = mode == Mode::kDecode ? 2 : 0;
          cfg.lq = mode == Mode::kDecode ? std::vector<int64_t>{2, 2, 2}
                                         : std::vector<int64_t>{1, 54, 17};
          cfg.lk = {uniform_int(rng, 2, 130), 97, 17};
          run_case(c, seed, cfg, rng);
        });
      }
    }
    const uint64_t seed = test::case_seed();
    SCOPED_TRACE(test::case_note(c, seed, "store_kv head_dim " + std::to_string(d)));
    std::mt19937_64 rng(seed);
    const int64_t tokens = 37, hkv = 3, bs = 16, blocks = 4;
    test::RowBuffer key = test::make_rows(tokens, hkv, d, DType::kBF16, 5);
    test::RowBuffer value = test::make_rows(tokens, hkv, d, DType::kBF16, 0);
    test::fill_random(key.view, rng);
    test::fill_random(value.view, rng);
    Tensor kc = Tensor::empty({blocks, bs, hkv, d}, DType::kBF16);
    Tensor vc = Tensor::empty({blocks, bs, hkv, d}, DType::kBF16);
    test::fill_random(kc.view(), rng);
    test::fill_random(vc.view(), rng);
    Tensor kc_ref = Tensor::empty({blocks, bs, hkv, d}, DType::kBF16);
    Tensor vc_ref = Tensor::empty({blocks, bs, hkv, d}, DType::kBF16);
    std::memcpy(kc_ref.ptr<char>(), kc.ptr<char>(), kc.view().nbytes());
    std::memcpy(vc_ref.ptr<char>(), vc.ptr<char>(), vc.view().nbytes());
    std::vector<int64_t> slots(tokens);
    for (int64_t i = 0; i < tokens; ++i) slots[i] = i % 5 == 0 ? -1 : (i * 7) % (blocks * bs);
    Tensor slot_t = test::int_tensor(slots, DType::kI64);
    ASSERT_NO_THROW(store_kv(key.view, value.view, kc, vc, slot_t));
    test::store_kv_reference(key.view, value.view, kc_ref, vc_ref, slot_t);
    EXPECT_EQ(test::bytes_of(kc), test::bytes_of(kc_ref));
    EXPECT_EQ(test::bytes_of(vc), test::bytes_of(vc_ref));
  }
}

}  // namespace
}  // namespace kvattn
