// Shared by the mask-modifier tests (alibi_headdim_test, window_softcap_test): the options
// both draw, the op of one case (packed prefill, paged prefill or decode) on fresh random
// inputs next to its float64 reference, the check of one case, the random-case loop and the
// seeding and common fields of a hand-picked case. A suite adds its own options (ALiBi slopes,
// leftpad) to the op through the `extra` argument setters.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn::test::mask_mods {

enum class Mode { kPacked, kPaged, kDecode };

// The options of one case that both suites draw; a suite's Config derives from it.
struct Options {
  Mode mode = Mode::kPacked;
  DType dt = DType::kF32;
  bool causal = true;
  int64_t left = -1, right = -1;
  float softcap = 0.0f;
  int64_t hkv = 2, group = 1, d = 64, bs = 16, q_len = 1;  // q_len: decode only
  float scale = 0.0f;
  std::vector<int64_t> lq, lk;  // decode: lq[b] == q_len, lk = cache_seqlens

  int64_t heads() const { return hkv * group; }
};

// "packed float32 causal window (l, r) softcap s".
inline void describe_mask(std::ostream& os, const Options& o) {
  os << (o.mode == Mode::kPacked ? "packed" : o.mode == Mode::kPaged ? "paged" : "decode") << " "
     << o.dt << (o.causal ? " causal" : " full") << " window (" << o.left << ", " << o.right
     << ") softcap " << o.softcap;
}

// " H heads/hkv D d bs bs".
inline void describe_sizes(std::ostream& os, const Options& o) {
  os << " H " << o.heads() << "/" << o.hkv << " D " << o.d << " bs " << o.bs;
}

// " lq/lk" and each sequence's " lq/lk".
inline void describe_lengths(std::ostream& os, const Options& o) {
  os << " lq/lk";
  for (size_t b = 0; b < o.lq.size(); ++b) os << " " << o.lq[b] << "/" << o.lk[b];
}

struct Result {
  test::RowBuffer out;
  Tensor lse;
  test::RefAttention ref;
};

// One case's op before it runs: the sequence offsets, the query, the poisoned outputs and
// the reference's mask (window and softcap; a suite may add to it) and scale.
struct Op {
  std::vector<int64_t> cu_q, cu_k;  // prefix sums of lq and lk
  test::RowBuffer q;
  Result r;
  test::RefMask mask;
  double scale = 0.0;
};

// Draws the query (values in [-2, 2], token pad 0 or 5) and poisons out and lse.
inline Op start_op(const Options& o, std::mt19937_64& rng) {
  const int64_t H = o.heads(), D = o.d;
  Op op;
  op.cu_q.assign(1, 0);
  op.cu_k.assign(1, 0);
  for (size_t b = 0; b < o.lq.size(); ++b) {
    op.cu_q.push_back(op.cu_q.back() + o.lq[b]);
    op.cu_k.push_back(op.cu_k.back() + o.lk[b]);
  }
  const int64_t total_q = op.cu_q.back();
  op.q = test::make_rows(total_q, H, D, o.dt, uniform_int(rng, 0, 1) * 5);
  test::fill_random(op.q.view, rng, -2.0f, 2.0f);
  op.r.out = test::make_rows(total_q, H, D, o.dt, 0);  // poisoned
  op.r.lse = Tensor::empty({H, total_q}, DType::kF32);
  test::poison(op.r.lse.view());
  op.mask = {o.left, o.right, static_cast<double>(o.softcap)};
  op.scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(D));
  return op;
}

// The fields PrefillArgs and DecodeArgs share: scale, causal, window, softcap, out and lse.
template <typename Args>
void set_mask_and_outputs(const Options& o, Op& op, Args& a) {
  a.softmax_scale = o.scale;
  a.causal = o.causal;
  a.window_left = o.left;
  a.window_right = o.right;
  a.softcap = o.softcap;
  a.out = op.r.out.view;
  a.lse = op.r.lse.view();
}

// Runs prefill_attention on op's query over k and v: packed rows, or the paged caches of
// block_table when it is set. extra(PrefillArgs&) adds the suite's arguments.
template <typename Extra>
void run_prefill(const Options& o, Op& op, const TensorView& k, const TensorView& v,
                 const TensorView& block_table, const Extra& extra) {
  Tensor cu_q_t = test::int_tensor(op.cu_q), cu_k_t = test::int_tensor(op.cu_k);
  PrefillArgs a;
  a.q = op.q.view;
  a.k = k;
  a.v = v;
  a.block_table = block_table;
  a.cu_seqlens_q = cu_q_t;
  a.cu_seqlens_k = cu_k_t;
  set_mask_and_outputs(o, op, a);
  extra(a);
  EXPECT_NO_THROW(prefill_attention(a));
}

// Packed prefill on fresh random k and v (k with token pad 3); extra(PrefillArgs&) adds the
// suite's arguments. Returns the outputs and the reference.
template <typename Extra>
Result run_packed(const Options& o, Op& op, std::mt19937_64& rng, const Extra& extra) {
  const int64_t total_k = op.cu_k.back();
  test::RowBuffer kb = test::make_rows(total_k, o.hkv, o.d, o.dt, 3);
  test::RowBuffer vb = test::make_rows(total_k, o.hkv, o.d, o.dt, 0);
  test::fill_random(kb.view, rng);
  test::fill_random(vb.view, rng);
  run_prefill(o, op, kb.view, vb.view, TensorView(), extra);
  op.r.ref = test::prefill_reference(op.q.view, kb.view, vb.view, op.cu_q, op.cu_k, op.scale,
                                     o.causal, op.mask);
  return std::move(op.r);
}

// Paged prefill over kv; extra(PrefillArgs&) adds the suite's arguments.
template <typename Extra>
Result run_paged(const Options& o, Op& op, const test::PagedKv& kv, const Extra& extra) {
  run_prefill(o, op, kv.k_cache, kv.v_cache, kv.block_table, extra);
  op.r.ref = test::paged_prefill_reference(op.q.view, kv.k_cache, kv.v_cache, kv.block_table,
                                           op.cu_q, op.cu_k, op.scale, o.causal, op.mask);
  return std::move(op.r);
}

// Decode over kv with cache_seqlens = lk; the reference skips each sequence's first pads[b]
// keys (pads empty: none). extra(DecodeArgs&) adds the suite's arguments (cache_leftpad too).
template <typename Extra>
Result run_decode(const Options& o, Op& op, const test::PagedKv& kv,
                  const std::vector<int64_t>& pads, const Extra& extra) {
  Tensor lens = test::int_tensor(o.lk);
  DecodeArgs a;
  a.q = op.q.view;
  a.k_cache = kv.k_cache;
  a.v_cache = kv.v_cache;
  a.block_table = kv.block_table;
  a.cache_seqlens = lens;
  a.q_len = o.q_len;
  set_mask_and_outputs(o, op, a);
  extra(a);
  EXPECT_NO_THROW(decode_attention(a));
  op.r.ref = test::decode_reference(op.q.view, kv.k_cache, kv.v_cache, kv.block_table, lens,
                                    o.q_len, op.scale, o.causal, op.mask, pads);
  return std::move(op.r);
}

// Runs case c of cfg (a Config derived from Options, with describe()) through run_op and
// checks it: close to the reference under the tolerance key "<prefill|decode> <suite>
// <dtype>", and nothing written outside out.
template <typename Config, typename RunOp>
void run_case(int c, uint64_t seed, const Config& cfg, std::mt19937_64& rng,
              const std::string& suite, const RunOp& run_op) {
  SCOPED_TRACE(test::case_note(c, seed, cfg.describe()));
  Result r = run_op(cfg, rng);
  if (::testing::Test::HasFailure()) return;
  std::ostringstream label;
  label << "c" << c << " " << cfg.describe();
  const std::string key = std::string(cfg.mode == Mode::kDecode ? "decode " : "prefill ") +
                          suite + " " + std::string(dtype_name(cfg.dt));
  test::expect_attention_close(r.ref, r.out.view, r.lse.view(), key, label.str());
  EXPECT_TRUE(test::untouched_outside(r.out.storage, r.out.view)) << "wrote outside out";
}

// Runs case c when it is selected: fn(seed, rng) on a fresh seed and an rng seeded with it.
template <typename Fn>
void run_if_selected(int c, const Fn& fn) {
  if (!test::case_selected(c)) return;
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  fn(seed, rng);
}

// Cases 0..cases-1 (those selected): case c draws its config with draw(c % structured, rng)
// and runs it with run(c, seed, cfg, rng) on the same rng. Stops at the first fatal failure.
template <typename Draw, typename Run>
void run_random_cases(int cases, int structured, const Draw& draw, const Run& run) {
  for (int c = 0; c < cases; ++c) {
    run_if_selected(c, [&](uint64_t seed, std::mt19937_64& rng) {
      run(c, seed, draw(c % structured, rng), rng);
    });
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Copies what every hand-picked shape fixes (mode, causal, window, softcap, page size, q_len
// and lengths) and dt into cfg.
template <typename Shape>
void set_shape(const Shape& s, DType dt, Options& cfg) {
  cfg.mode = s.mode;
  cfg.dt = dt;
  cfg.causal = s.causal;
  cfg.left = s.left;
  cfg.right = s.right;
  cfg.softcap = s.softcap;
  cfg.bs = s.bs;
  cfg.q_len = s.q_len;
  cfg.lq = s.lq;
  cfg.lk = s.lk;
}

}  // namespace kvattn::test::mask_mods
