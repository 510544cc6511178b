// merge_attention_states (CPU) against a float64 reference, on fresh random cases: all three
// dtypes, head_dim 64/80/128/256 and odd ones up to 512, tokens 0/1/odd, heads 1..8, padded
// token strides, lse pairs that are ordinary, 80-100 apart (exp over/underflows in float32 if
// done naively), huge in magnitude, equal, or -inf on one or both sides. Outputs start as NaN;
// the padding between rows must stay untouched. Also: out = out_a / lse = lse_a aliasing, lse
// omitted, NaN and +inf lse (NaN rows), and every bad argument named in its error.
#include "kvattn/kernels/merge_attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "support/case_util.h"
#include "support/test_util.h"
#include "merge_case.h"

namespace kvattn {
namespace {

using ::testing::HasSubstr;
using test::pick;
using test::uniform_int;
using namespace test::merge;  // NOLINT: the shared case helpers

// The inputs of one case; out and lse start poisoned (NaN).
struct MergeCase {
  DType dt = DType::kF32;
  int64_t tokens = 0, heads = 0, d = 0;
  test::RowBuffer a, b, o;
  Tensor lse_a, lse_b, lse;
  std::string what;
};

MergeCase make_case(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t d) {
  MergeCase c;
  c.dt = dt;
  c.tokens = tokens;
  c.heads = heads;
  c.d = d;
  const std::vector<int64_t> pads{0, 0, 1, 8, 13};
  const int64_t pa = pick(rng, pads), pb = pick(rng, pads), po = pick(rng, pads);
  c.a = test::make_rows(tokens, heads, d, dt, pa, uniform_int(rng, 0, 3));
  c.b = test::make_rows(tokens, heads, d, dt, pb, uniform_int(rng, 0, 3));
  c.o = test::make_rows(tokens, heads, d, dt, po, uniform_int(rng, 0, 3));
  test::fill_random(c.a.view, rng, -4.0f, 4.0f);
  test::fill_random(c.b.view, rng, -4.0f, 4.0f);
  c.lse_a = Tensor::empty({heads, tokens}, DType::kF32);
  c.lse_b = Tensor::empty({heads, tokens}, DType::kF32);
  c.lse = Tensor::empty({heads, tokens}, DType::kF32);
  for (int64_t i = 0; i < heads * tokens; ++i) {
    draw_lse_pair(rng, c.lse_a.ptr<float>()[i], c.lse_b.ptr<float>()[i]);
  }
  poison_unseen_rows(rng, c.a.view, c.lse_a);
  poison_unseen_rows(rng, c.b.view, c.lse_b);
  test::poison(c.lse.view());
  std::ostringstream os;
  os << dtype_name(dt) << " tokens " << tokens << " heads " << heads << " head_dim " << d
     << " pads " << pa << "/" << pb << "/" << po;
  c.what = os.str();
  return c;
}

// out and lse against the reference; rows whose lse is -inf on one side equal the other side's
// row exactly, rows with both -inf are exactly zero.
void expect_merged(const Ref& ref, const TensorView& out, const TensorView& lse,
                   const std::vector<double>& la, const std::vector<double>& lb,
                   const std::vector<double>& oa, const std::vector<double>& ob,
                   const std::string& key) {
  const std::vector<double> got = test::to_doubles(out);
  const test::ErrorStats e = test::compare(got, ref.out);
  EXPECT_FALSE(e.has_nan) << "NaN in out";
  EXPECT_LE(e.rel_l2, test::rel_l2_tolerance(out.dtype));
  EXPECT_LE(e.max_abs, max_abs_tolerance(out.dtype));
  const int64_t tokens = out.size(0), heads = out.size(1), d = out.size(2);
  int64_t exact_mismatch = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t li = static_cast<size_t>(h * tokens + t);
      if (la[li] != -kInf && lb[li] != -kInf) continue;
      for (int64_t x = 0; x < d; ++x) {
        const size_t i = static_cast<size_t>((t * heads + h) * d + x);
        const double want = la[li] != -kInf ? oa[i] : (lb[li] != -kInf ? ob[i] : 0.0);
        exact_mismatch += got[i] != want;
      }
    }
  }
  EXPECT_EQ(exact_mismatch, 0) << "rows with a -inf side must pass the other side exactly";
  double lse_abs = -1.0, lse_scaled = -1.0;
  if (lse.defined()) {
    const test::LseStats ls = test::compare_lse(test::to_doubles(lse), ref.lse);
    EXPECT_TRUE(ls.ok) << "lse: NaN, or -inf on one side only";
    EXPECT_LE(ls.max_scaled, test::kLseTolerance);
    lse_abs = ls.max_abs;
    lse_scaled = ls.max_scaled;
  }
  test::record_error(key, e, lse_abs, lse_scaled);
}

enum class Alias { kNone, kA, kB };

void run_case(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t d,
              Alias alias, bool with_lse) {
  MergeCase c = make_case(rng, dt, tokens, heads, d);
  const std::vector<double> la = test::to_doubles(c.lse_a), lb = test::to_doubles(c.lse_b);
  const std::vector<double> oa = test::to_doubles(c.a.view), ob = test::to_doubles(c.b.view);
  const Ref ref = reference(c.a.view, c.lse_a, c.b.view, c.lse_b);
  MergeStatesArgs args{c.a.view, c.lse_a, c.b.view, c.lse_b, c.o.view, with_lse ? c.lse.view()
                                                                                : TensorView()};
  const Tensor* out_storage = &c.o.storage;
  const std::vector<uint8_t> lse_before = test::bytes_of(c.lse);
  if (alias == Alias::kA) {
    args.out = c.a.view;
    args.lse = with_lse ? c.lse_a.view() : TensorView();
    out_storage = &c.a.storage;
  } else if (alias == Alias::kB) {
    args.out = c.b.view;
    args.lse = with_lse ? c.lse_b.view() : TensorView();
    out_storage = &c.b.storage;
  }
  merge_attention_states(args);
  EXPECT_TRUE(test::untouched_outside(*out_storage, args.out)) << "bytes outside out written";
  if (alias == Alias::kNone && !with_lse) {
    EXPECT_EQ(test::bytes_of(c.lse), lse_before) << "lse written though omitted";
  }
  std::string key = std::string("merge ") + std::string(dtype_name(dt));
  if (alias != Alias::kNone) key += " aliased";
  expect_merged(ref, args.out, args.lse, la, lb, oa, ob, key);
}

const std::vector<DType> kDtypes{DType::kF32, DType::kBF16, DType::kF16};

TEST(MergeAttentionStates, RandomCasesMatchFloat64Reference) {
  const int n = test::case_count(240, 40);
  for (int i = 0; i < n; ++i) {
    if (!test::case_selected(i)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = kDtypes[static_cast<size_t>(i) % kDtypes.size()];
    const int64_t d = pick(rng, std::vector<int64_t>{64, 80, 128, 256, 1, 3, 7, 33, 97, 200,
                                                     511, 512});
    const int64_t tokens = pick(rng, std::vector<int64_t>{1, 2, 3, 17, 64}) +
                           (uniform_int(rng, 0, 2) == 0 ? 2 * uniform_int(rng, 0, 40) : 0);
    const int64_t heads = uniform_int(rng, 1, 8);
    const Alias alias = pick(rng, std::vector<Alias>{Alias::kNone, Alias::kNone, Alias::kA,
                                                     Alias::kB});
    const bool with_lse = uniform_int(rng, 0, 4) != 0;
    std::ostringstream what;
    what << dtype_name(dt) << " tokens " << tokens << " heads " << heads << " head_dim " << d
         << " alias " << static_cast<int>(alias) << " lse " << with_lse;
    SCOPED_TRACE(test::case_note(i, seed, what.str()));
    run_case(rng, dt, tokens, heads, d, alias, with_lse);
    if (::testing::Test::HasFailure()) return;
  }
}

// The head dims the brief names, each dtype, through each aliasing form.
TEST(MergeAttentionStates, EveryDtypeHeadDimAndAlias) {
  int index = 0;
  for (DType dt : kDtypes) {
    for (int64_t d : {64, 80, 128, 256, 5}) {
      for (Alias alias : {Alias::kNone, Alias::kA, Alias::kB}) {
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        const int64_t tokens = 2 * uniform_int(rng, 0, 20) + 1;  // odd
        const int64_t heads = uniform_int(rng, 1, 8);
        std::ostringstream what;
        what << dtype_name(dt) << " head_dim " << d << " tokens " << tokens << " heads "
             << heads << " alias " << static_cast<int>(alias);
        SCOPED_TRACE(test::case_note(index++, seed, what.str()));
        run_case(rng, dt, tokens, heads, d, alias, true);
      }
    }
  }
}

// lse arrays given as column ranges of wider [heads, T] arrays (the cascade decode's run of
// rows): the same bits as the contiguous call; lse written into its range only.
TEST(MergeAttentionStates, LseWithAHeadStrideEqualsContiguous) {
  std::mt19937_64 rng(test::case_seed());
  for (DType dt : kDtypes) {
    const int64_t tokens = 5, heads = 3, d = 64, wide = 11, first = 4;
    MergeCase c = make_case(rng, dt, tokens, heads, d);
    Tensor ref_out = Tensor::empty({tokens, heads, d}, dt);
    Tensor ref_lse = Tensor::empty({heads, tokens}, DType::kF32);
    merge_attention_states({c.a.view, c.lse_a, c.b.view, c.lse_b, ref_out.view(), ref_lse.view()});
    Tensor wa = Tensor::empty({heads, wide}, DType::kF32), wb = Tensor::empty({heads, wide}, DType::kF32);
    Tensor wl = Tensor::empty({heads, wide}, DType::kF32);
    test::poison(wa.view());
    test::poison(wb.view());
    test::poison(wl.view());
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < tokens; ++t) {
        wa.ptr<float>()[h * wide + first + t] = c.lse_a.ptr<float>()[h * tokens + t];
        wb.ptr<float>()[h * wide + first + t] = c.lse_b.ptr<float>()[h * tokens + t];
      }
    }
    auto range = [&](const Tensor& w) {
      return TensorView(w.ptr<float>() + first, DType::kF32, Device::cpu(), {heads, tokens},
                        {wide, 1});
    };
    Tensor out = Tensor::empty({tokens, heads, d}, dt);
    test::poison(out.view());
    merge_attention_states({c.a.view, range(wa), c.b.view, range(wb), out.view(), range(wl)});
    EXPECT_EQ(test::bytes_of(out), test::bytes_of(ref_out)) << dtype_name(dt);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < wide; ++t) {
        const float got = wl.ptr<float>()[h * wide + t];
        if (t >= first && t < first + tokens) {
          EXPECT_EQ(got, ref_lse.ptr<float>()[h * tokens + t - first]) << h << ", " << t;
        } else {
          EXPECT_TRUE(std::isnan(got)) << "lse written outside its range at " << h << ", " << t;
        }
      }
    }
  }
}

TEST(MergeAttentionStates, ZeroTokensIsANoOp) {
  std::mt19937_64 rng(test::case_seed());
  for (DType dt : kDtypes) {
    MergeCase c = make_case(rng, dt, 0, 4, 128);
    const std::vector<uint8_t> before = test::bytes_of(c.o.storage);
    merge_attention_states({c.a.view, c.lse_a, c.b.view, c.lse_b, c.o.view, c.lse});
    EXPECT_EQ(test::bytes_of(c.o.storage), before);
  }
}

// NaN or +inf on either side: the row is NaN, lse NaN; the other rows are unaffected.
TEST(MergeAttentionStates, NanAndPlusInfLseGiveNanRows) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "NaN / +inf lse"));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> bad{
      {nan, 1.0f}, {1.0f, nan}, {kInfF, 1.0f}, {2.0f, kInfF}, {kInfF, kInfF},
      {nan, -kInfF}, {-kInfF, kInfF}, {kInfF, -kInfF}};
  for (DType dt : kDtypes) {
    const int64_t tokens = static_cast<int64_t>(bad.size()) + 1, heads = 2, d = 24;
    MergeCase c = make_case(rng, dt, tokens, heads, d);
    for (int64_t t = 0; t + 1 < tokens; ++t) {  // head 1 of every token but the last
      c.lse_a.ptr<float>()[tokens + t] = bad[t].first;
      c.lse_b.ptr<float>()[tokens + t] = bad[t].second;
    }
    c.lse_a.ptr<float>()[2 * tokens - 1] = 0.5f;
    c.lse_b.ptr<float>()[2 * tokens - 1] = -0.25f;
    test::fill_random(c.a.view, rng, -4.0f, 4.0f);  // no NaN rows (make_case's)
    test::fill_random(c.b.view, rng, -4.0f, 4.0f);
    merge_attention_states({c.a.view, c.lse_a, c.b.view, c.lse_b, c.o.view, c.lse});
    const std::vector<double> got = test::to_doubles(c.o.view);
    for (int64_t t = 0; t < tokens; ++t) {
      const bool bad_row = t + 1 < tokens;
      EXPECT_EQ(std::isnan(c.lse.ptr<float>()[tokens + t]), bad_row) << "token " << t;
      for (int64_t x = 0; x < d; ++x) {
        EXPECT_EQ(std::isnan(got[static_cast<size_t>((t * heads + 1) * d + x)]), bad_row)
            << dtype_name(dt) << " token " << t << " element " << x;
      }
    }
  }
}

// ---- bad arguments -----------------------------------------------------------------------

struct Valid {
  Tensor a = Tensor::zeros({3, 2, 16}, DType::kBF16);
  Tensor b = Tensor::zeros({3, 2, 16}, DType::kBF16);
  Tensor o = Tensor::zeros({3, 2, 16}, DType::kBF16);
  Tensor la = Tensor::zeros({2, 3}, DType::kF32);
  Tensor lb = Tensor::zeros({2, 3}, DType::kF32);
  Tensor l = Tensor::zeros({2, 3}, DType::kF32);
  MergeStatesArgs args() const { return {a, la, b, lb, o, l}; }
};

void expect_error(const MergeStatesArgs& args, const std::vector<std::string>& parts) {
  try {
    merge_attention_states(args);
    ADD_FAILURE() << "no error; expected one naming " << parts.front();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("merge_attention_states: "));
    for (const auto& p : parts) EXPECT_THAT(msg, HasSubstr(p));
  }
}

TEST(MergeAttentionStates, BadArgumentsNameTheArgument) {
  Valid v;
  EXPECT_NO_THROW(merge_attention_states(v.args()));
  MergeStatesArgs no_lse = v.args();
  no_lse.lse = TensorView();
  EXPECT_NO_THROW(merge_attention_states(no_lse));

  auto with = [&](auto edit) {
    MergeStatesArgs a = v.args();
    edit(a);
    return a;
  };
  const Tensor i32 = Tensor::zeros({3, 2, 16}, DType::kI32);
  const Tensor f16 = Tensor::zeros({3, 2, 16}, DType::kF16);
  const Tensor rows_big = Tensor::zeros({3, 2, 40}, DType::kBF16);
  const Tensor big_d = Tensor::zeros({1, 1, 513}, DType::kBF16);
  const Tensor lse_bf16 = Tensor::zeros({2, 3}, DType::kBF16);
  const Tensor lse_t = Tensor::zeros({3, 2}, DType::kF32);
  const Tensor lse_wide = Tensor::zeros({2, 6}, DType::kF32);

  expect_error(with([](auto& a) { a.out_a = TensorView(); }), {"out_a must be given"});
  expect_error(with([](auto& a) { a.lse_a = TensorView(); }), {"lse_a must be given"});
  expect_error(with([](auto& a) { a.lse_b = TensorView(); }), {"lse_b must be given"});
  expect_error(with([](auto& a) { a.out_b = TensorView(); }), {"out_b must be given"});
  expect_error(with([](auto& a) { a.out = TensorView(); }), {"out must be given"});
  expect_error(with([&](auto& a) { a.out_a = v.a.view().reshape({6, 16}); }),
               {"out_a must have rank 3", "rank 2"});
  expect_error(with([&](auto& a) { a.out_a = i32; a.out_b = i32; a.out = i32; }),
               {"out_a dtype", "int32"});
  expect_error(with([&](auto& a) { a.out_b = f16; }), {"out_b dtype must be bfloat16", "float16"});
  expect_error(with([&](auto& a) { a.out = f16; }), {"out dtype must be bfloat16", "float16"});
  expect_error(with([&](auto& a) {
                 a.out_b = Tensor::zeros({3, 3, 16}, DType::kBF16);
               }),
               {"out_b shape must equal out_a shape [3, 2, 16]", "[3, 3, 16]"});
  expect_error(with([&](auto& a) { a.out = Tensor::zeros({4, 2, 16}, DType::kBF16); }),
               {"out shape must equal out_a shape", "[4, 2, 16]"});
  expect_error(with([&](auto& a) {
                 a.out_a = big_d;
                 a.out_b = big_d;
                 a.out = big_d;
                 a.lse_a = Tensor::zeros({1, 1}, DType::kF32);
               }),
               {"head_dim must be in [1, 512]", "513"});
  // Views with bad strides: head_dim not contiguous; head stride != head_dim; overlapping rows.
  const TensorView strided_d(rows_big.data(), DType::kBF16, Device::cpu(), {3, 2, 16},
                             {80, 40, 2});
  expect_error(with([&](auto& a) { a.out_b = strided_d; }), {"out_b stride(2) must be 1", "2"});
  const TensorView head_gap(rows_big.data(), DType::kBF16, Device::cpu(), {3, 2, 16},
                            {80, 20, 1});
  expect_error(with([&](auto& a) { a.out_a = head_gap; }),
               {"out_a stride(1) must be 16", "20"});
  const TensorView overlap(rows_big.data(), DType::kBF16, Device::cpu(), {3, 2, 16},
                           {16, 16, 1});
  expect_error(with([&](auto& a) { a.out = overlap; }), {"out token stride must be >= ", "32"});
  const TensorView same_ptr_other_stride(v.a.data(), DType::kBF16, Device::cpu(), {3, 2, 16},
                                         {40, 16, 1});
  expect_error(with([&](auto& a) { a.out = same_ptr_other_stride; }),
               {"out aliases out_a", "token stride must be 32", "40"});
  // lse: shape [num_heads, tokens], float32, contiguous.
  expect_error(with([&](auto& a) { a.lse_a = lse_t; }),
               {"lse_a shape must be [num_heads, tokens] = [2, 3]", "[3, 2]"});
  expect_error(with([&](auto& a) { a.lse_b = lse_bf16; }), {"lse_b dtype must be float32",
                                                            "bfloat16"});
  expect_error(with([&](auto& a) { a.lse = lse_t; }), {"lse shape must be", "[3, 2]"});
  expect_error(with([&](auto& a) { a.lse_a = v.la.view().reshape({6}); }),
               {"lse_a must have rank 2"});
  const TensorView lse_strided(lse_wide.data(), DType::kF32, Device::cpu(), {2, 3}, {6, 2});
  expect_error(with([&](auto& a) { a.lse = lse_strided; }),
               {"lse must have contiguous tokens", "stride(1) is 2"});
  const TensorView lse_narrow(lse_wide.data(), DType::kF32, Device::cpu(), {2, 3}, {2, 1});
  expect_error(with([&](auto& a) { a.lse_b = lse_narrow; }),
               {"lse_b head stride must be >= tokens (3)", "2"});
  // Devices.
  auto on_gpu = [](const TensorView& t) {
    TensorView g = t;
    g.device = Device::cuda(0);
    return g;
  };
  expect_error(with([&](auto& a) { a.out_b = on_gpu(a.out_b); }), {"out_b must be on cpu",
                                                                   "cuda:0"});
  expect_error(with([&](auto& a) { a.out = on_gpu(a.out); }), {"out must be on cpu", "cuda:0"});
  expect_error(with([&](auto& a) { a.lse_a = on_gpu(a.lse_a); }), {"lse_a must be on cpu"});
  expect_error(with([&](auto& a) { a.lse_b = on_gpu(a.lse_b); }), {"lse_b must be on cpu"});
  expect_error(with([&](auto& a) { a.lse = on_gpu(a.lse); }), {"lse must be on cpu"});
#ifndef KVATTN_WITH_CUDA
  expect_error(with([&](auto& a) {
                 a.out_a = on_gpu(a.out_a);
                 a.out_b = on_gpu(a.out_b);
                 a.out = on_gpu(a.out);
                 a.lse_a = on_gpu(a.lse_a);
                 a.lse_b = on_gpu(a.lse_b);
                 a.lse = on_gpu(a.lse);
               }),
               {"out_a is on cuda:0", "no CUDA backend"});
#endif
}

}  // namespace
}  // namespace kvattn
