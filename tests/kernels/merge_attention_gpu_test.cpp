// merge_attention_states on the GPU against the float64 reference and against the CPU backend,
// on the same fresh random cases: all three dtypes, head_dim 64/80/128/256 and odd ones up to
// 512, tokens 1/odd/thousands, heads 1..8, lse pairs ordinary, 80-100 apart, huge, equal or
// -inf on one or both sides. Both kernel forms: 16-byte vectors (aligned pointers and strides)
// and scalar (a base or token stride off by an element, or head_dim not a whole number of
// vectors). Outputs start as NaN and the padding between rows must stay untouched. Also: out =
// out_a / lse = lse_a aliasing, NaN / +inf lse, and a CUDA-graph capture on a side stream
// replayed on new inputs. No case may leave a bit in the device fault word.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/merge_attention.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/test_util.h"
#include "merge_case.h"

namespace kvattn {
namespace {

using test::Mirror;
using namespace test::merge;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

const Device kGpu = Device::cuda(0);
// One case's host inputs; out and lse poisoned. `aligned`: every base and token stride a
// multiple of 16 bytes (the vector form when head_dim allows it), else each is off by one
// element with some probability.
struct MergeCase {
  int64_t tokens = 0, heads = 0, d = 0;
  test::RowBuffer a, b, o;
  Tensor lse_a, lse_b, lse;
};

MergeCase make_case(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t d,
                    bool aligned, std::string& what) {
  MergeCase c;
  c.tokens = tokens;
  c.heads = heads;
  c.d = d;
  const int64_t per16 = 16 / dtype_size(dt);
  auto pad = [&] {
    return aligned ? per16 * uniform_int(rng, 0, 2) : pick(rng, std::vector<int64_t>{0, 1, 3});
  };
  auto lead = [&] { return aligned ? per16 * uniform_int(rng, 0, 2) : uniform_int(rng, 0, 1); };
  const int64_t pa = pad(), pb = pad(), po = pad();
  c.a = test::make_rows(tokens, heads, d, dt, pa, lead());
  c.b = test::make_rows(tokens, heads, d, dt, pb, lead());
  c.o = test::make_rows(tokens, heads, d, dt, po, lead());
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
     << (aligned ? " aligned" : " unaligned") << " pads " << pa << "/" << pb << "/" << po
     << " leads " << (c.a.view.data != c.a.storage.data()) << (c.b.view.data != c.b.storage.data())
     << (c.o.view.data != c.o.storage.data());
  what = os.str();
  return c;
}

enum class Alias { kNone, kA };

// Runs one case on the GPU and on the CPU backend, checks both against the reference and the
// GPU against the CPU.
void run_case(std::mt19937_64& rng, DType dt, int64_t tokens, int64_t heads, int64_t d,
              bool aligned, Alias alias, bool with_lse, const std::string& note) {
  std::string what;
  MergeCase c = make_case(rng, dt, tokens, heads, d, aligned, what);
  SCOPED_TRACE(note + " " + what);
  const Ref ref = reference(c.a.view, c.lse_a, c.b.view, c.lse_b);
  const Mirror ma = Mirror::of(c.a.storage), mb = Mirror::of(c.b.storage),
               mo = Mirror::of(c.o.storage);
  const Mirror mla = Mirror::of(c.lse_a), mlb = Mirror::of(c.lse_b), ml = Mirror::of(c.lse);

  MergeStatesArgs g{ma.on_device(c.a.view), mla.on_device(c.lse_a), mb.on_device(c.b.view),
                    mlb.on_device(c.lse_b), mo.on_device(c.o.view),
                    with_lse ? ml.on_device(c.lse) : TensorView()};
  const Mirror* out_mirror = &mo;
  const Mirror* lse_mirror = &ml;
  const TensorView* out_host = &c.o.view;
  const Tensor* lse_host = &c.lse;
  if (alias == Alias::kA) {
    g.out = g.out_a;
    g.lse = with_lse ? g.lse_a : TensorView();
    out_mirror = &ma;
    lse_mirror = &mla;
    out_host = &c.a.view;
    lse_host = &c.lse_a;
  }
  // The CPU backend on host copies of the inputs (never aliased: the reference of the reference).
  const Tensor cpu_out = Tensor::empty({tokens, heads, d}, dt);
  const Tensor cpu_lse = Tensor::empty({heads, tokens}, DType::kF32);
  merge_attention_states({c.a.view, c.lse_a, c.b.view, c.lse_b, cpu_out, cpu_lse});

  ASSERT_EQ(read_device_faults(kGpu), 0u) << "fault word not clean before the case";
  merge_attention_states(g);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(read_device_faults(kGpu), 0u);

  const Tensor out_dl = out_mirror->download();
  const TensorView out = out_mirror->in(out_dl, *out_host);
  EXPECT_TRUE(test::untouched_outside(out_dl, out)) << "bytes outside out written";
  const std::vector<double> got = test::to_doubles(out);
  const test::ErrorStats e = test::compare(got, ref.out);
  EXPECT_FALSE(e.has_nan);
  EXPECT_LE(e.rel_l2, test::rel_l2_tolerance(dt));
  EXPECT_LE(e.max_abs, max_abs_tolerance(dt));
  const test::ErrorStats ec = test::compare(got, test::to_doubles(cpu_out));
  EXPECT_FALSE(ec.has_nan);
  EXPECT_LE(ec.max_abs, max_abs_tolerance(dt)) << "GPU vs CPU";

  double lse_abs = -1.0, lse_scaled = -1.0;
  if (with_lse) {
    const Tensor lse_dl = lse_mirror->download();
    const std::vector<double> lse = test::to_doubles(lse_mirror->in(lse_dl, lse_host->view()));
    const test::LseStats ls = test::compare_lse(lse, ref.lse);
    EXPECT_TRUE(ls.ok) << "lse: NaN, or -inf on one side only";
    EXPECT_LE(ls.max_scaled, test::kLseTolerance);
    const test::LseStats lc = test::compare_lse(lse, test::to_doubles(cpu_lse));
    EXPECT_TRUE(lc.ok);
    EXPECT_LE(lc.max_scaled, 1e-6) << "GPU vs CPU lse";
    lse_abs = ls.max_abs;
    lse_scaled = ls.max_scaled;
  } else {
    EXPECT_EQ(test::bytes_of(ml.download()), test::bytes_of(c.lse)) << "lse written though omitted";
  }
  std::string key = "merge gpu " + std::string(dtype_name(dt)) + (aligned ? " vec" : " scalar");
  test::record_error(key, e, lse_abs, lse_scaled);
}

const std::vector<DType> kDtypes{DType::kF32, DType::kBF16, DType::kF16};

TEST(MergeAttentionStatesGpu, RandomCasesMatchReferenceAndCpu) {
  const int n = test::quick_mode() ? 30 : 300;
  for (int i = 0; i < n; ++i) {
    if (!test::case_selected(i)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    const DType dt = kDtypes[static_cast<size_t>(i) % kDtypes.size()];
    const int64_t d = pick(rng, std::vector<int64_t>{64, 80, 128, 256, 64, 128, 1, 3, 7, 33,
                                                     97, 200, 511, 512});
    const int64_t tokens = pick(rng, std::vector<int64_t>{1, 3, 17, 64, 255, 1000});
    const int64_t heads = uniform_int(rng, 1, 8);
    const bool aligned = uniform_int(rng, 0, 2) != 0;
    const Alias alias = uniform_int(rng, 0, 3) == 0 ? Alias::kA : Alias::kNone;
    const bool with_lse = uniform_int(rng, 0, 4) != 0;
    run_case(rng, dt, tokens, heads, d, aligned, alias, with_lse,
             test::case_note(i, seed, alias == Alias::kA ? "aliased" : "separate"));
    if (::testing::Test::HasFailure()) return;
  }
}

// Every dtype x the brief's head dims x both kernel forms, then one large batch per dtype.
TEST(MergeAttentionStatesGpu, EveryDtypeHeadDimAndForm) {
  int index = 0;
  for (DType dt : kDtypes) {
    for (int64_t d : {64, 80, 128, 256, 5}) {
      for (bool aligned : {true, false}) {
        const uint64_t seed = test::case_seed();
        std::mt19937_64 rng(seed);
        const int64_t tokens = 2 * uniform_int(rng, 0, 40) + 1;
        run_case(rng, dt, tokens, uniform_int(rng, 1, 8), d, aligned, Alias::kA, true,
                 test::case_note(index++, seed, "sweep"));
      }
    }
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    run_case(rng, dt, test::quick_mode() ? 513 : 8193, 8, 128, true, Alias::kNone, true,
             test::case_note(index++, seed, "large"));
  }
}

TEST(MergeAttentionStatesGpu, NanAndPlusInfLseGiveNanRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> bad{{nan, 1.0f},     {1.0f, nan},
                                                 {kInfF, 1.0f},   {2.0f, kInfF},
                                                 {nan, -kInfF},   {-kInfF, kInfF}};
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "NaN / +inf lse"));
  for (DType dt : kDtypes) {
    for (bool aligned : {true, false}) {
      const int64_t tokens = static_cast<int64_t>(bad.size()) + 1, heads = 1, d = 64;
      std::string what;
      MergeCase c = make_case(rng, dt, tokens, heads, d, aligned, what);
      for (int64_t t = 0; t + 1 < tokens; ++t) {
        c.lse_a.ptr<float>()[t] = bad[t].first;
        c.lse_b.ptr<float>()[t] = bad[t].second;
      }
      c.lse_a.ptr<float>()[tokens - 1] = 0.5f;
      c.lse_b.ptr<float>()[tokens - 1] = -0.25f;
      test::fill_random(c.a.view, rng, -4.0f, 4.0f);  // no NaN rows (make_case's)
      test::fill_random(c.b.view, rng, -4.0f, 4.0f);
      const Mirror ma = Mirror::of(c.a.storage), mb = Mirror::of(c.b.storage),
                   mo = Mirror::of(c.o.storage);
      const Tensor la = c.lse_a.to(kGpu), lb = c.lse_b.to(kGpu), l = c.lse.to(kGpu);
      merge_attention_states({ma.on_device(c.a.view), la, mb.on_device(c.b.view), lb,
                              mo.on_device(c.o.view), l});
      const Tensor out_dl = mo.download();
      const std::vector<double> got = test::to_doubles(mo.in(out_dl, c.o.view));
      const Tensor lse = l.to(Device::cpu());
      for (int64_t t = 0; t < tokens; ++t) {
        const bool bad_row = t + 1 < tokens;
        EXPECT_EQ(std::isnan(lse.ptr<float>()[t]), bad_row) << what << " token " << t;
        for (int64_t x = 0; x < d; ++x) {
          EXPECT_EQ(std::isnan(got[static_cast<size_t>(t * d + x)]), bad_row)
              << what << " token " << t << " element " << x;
        }
      }
    }
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
}

// Captured once on a non-blocking stream, replayed on new inputs written in place.
TEST(MergeAttentionStatesGpu, CudaGraphCaptureAndReplay) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "graph capture"));
  const int64_t tokens = 37, heads = 4, d = 128;
  std::string what;
  MergeCase c = make_case(rng, DType::kBF16, tokens, heads, d, true, what);
  const Mirror ma = Mirror::of(c.a.storage), mb = Mirror::of(c.b.storage),
               mo = Mirror::of(c.o.storage);
  const Tensor la = c.lse_a.to(kGpu), lb = c.lse_b.to(kGpu), l = c.lse.to(kGpu);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MergeStatesArgs args{ma.on_device(c.a.view), la, mb.on_device(c.b.view), lb,
                       mo.on_device(c.o.view), l, Stream{stream}};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  merge_attention_states(args);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    test::fill_random(c.a.view, rng, -4.0f, 4.0f);
    test::fill_random(c.b.view, rng, -4.0f, 4.0f);
    for (int64_t i = 0; i < heads * tokens; ++i) {
      draw_lse_pair(rng, c.lse_a.ptr<float>()[i], c.lse_b.ptr<float>()[i]);
    }
    copy_bytes(ma.device.view(), c.a.storage.view());
    copy_bytes(mb.device.view(), c.b.storage.view());
    copy_bytes(la.view(), c.lse_a.view());
    copy_bytes(lb.view(), c.lse_b.view());
    CUDA_OK(cudaMemsetAsync(l.data(), 0xFF, static_cast<size_t>(l.nbytes()), stream));
    CUDA_OK(cudaMemsetAsync(mo.device.data(), 0xFF, static_cast<size_t>(mo.device.nbytes()),
                            stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const Ref ref = reference(c.a.view, c.lse_a, c.b.view, c.lse_b);
    const Tensor out_dl = mo.download();
    const auto e = test::compare(test::to_doubles(mo.in(out_dl, c.o.view)), ref.out);
    EXPECT_FALSE(e.has_nan) << "round " << round;
    EXPECT_LE(e.rel_l2, test::rel_l2_tolerance(DType::kBF16)) << "round " << round;
    const auto ls = test::compare_lse(test::to_doubles(l.to(Device::cpu())), ref.lse);
    EXPECT_TRUE(ls.ok) << "round " << round;
    EXPECT_LE(ls.max_scaled, test::kLseTolerance) << "round " << round;
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
