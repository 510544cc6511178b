// prefill_attention on the GPU given bad input (part of kernels_prefill_gpu_test; see
// prefill_gpu_test.cpp): bad block ids and lengths skipped and reported by the fault word, bad
// ids left of a window never read, and the shapes refused by name before any launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/error.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kernels/cuda/tuning.h"
#include "kernels/gpu_test_support.h"
#include "kernels/prefill_gpu_case.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using namespace test::prefill_gpu;  // NOLINT: the shared case helpers
using test::Mirror;

// ---- bad index values: skipped, reported, never out of bounds ----

struct FaultSetup {
  PrefillCase c;
  Paged pk;
  test::RowBuffer q, out;
  Mirror mq, mo, mkv, mt;
  Tensor cuq, cuk;
  PrefillArgs args;
};

void build_fault_setup(FaultSetup& f, std::mt19937_64& rng, const std::vector<int64_t>& table_edit,
                       std::vector<int64_t> cu_q, std::vector<int64_t> cu_k) {
  PrefillCase& c = f.c;
  c.paged = true;
  c.bs = 16;
  c.lq = {64, 64, 64};
  c.lk = {200, 200, 200};
  f.pk = make_paged(rng, c);
  auto* t = f.pk.table.ptr<int32_t>();
  const int64_t width = f.pk.table.size(1);
  for (size_t i = 0; i + 3 <= table_edit.size(); i += 3) {
    t[table_edit[i] * width + table_edit[i + 1]] = static_cast<int32_t>(table_edit[i + 2]);
  }
  const int64_t hq = c.hkv * c.group;
  f.q = test::make_rows(192, hq, c.d, c.dt, 0, 8);
  test::fill_random(f.q.view, rng);
  f.out = test::make_rows(192, hq, c.d, c.dt, 8, 64);
  f.mq = Mirror::of(f.q.storage);
  f.mo = Mirror::of(f.out.storage);
  f.mkv = Mirror::of(f.pk.storage);
  f.mt = Mirror::of(f.pk.table);
  f.cuq = test::int_tensor(cu_q).to(kGpu);
  f.cuk = test::int_tensor(cu_k).to(kGpu);
  f.args.q = f.mq.on_device(f.q.view);
  f.args.k = f.mkv.on_device(f.pk.k);
  f.args.v = f.mkv.on_device(f.pk.v);
  f.args.block_table = f.mt.on_device(f.pk.table.view());
  f.args.cu_seqlens_q = f.cuq.view();
  f.args.cu_seqlens_k = f.cuk.view();
  f.args.max_seqlen_q = 64;
  f.args.max_seqlen_k = 200;
  f.args.out = f.mo.on_device(f.out.view);
}

TEST(PrefillGpu, BadBlockIdsAreSkippedAndReported) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "bad block ids"));
  FaultSetup f;
  // Sequence 1, block 2: far past the cache; sequence 2, block 0: negative.
  build_fault_setup(f, rng, {1, 2, (1 << 28), 2, 0, -5}, {0, 64, 128, 192}, {0, 200, 400, 600});
  ASSERT_EQ(clear_faults(), 0u);
  prefill_attention(f.args);
  EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBlockOutOfRange));
  const Tensor dl = f.mo.download();
  const TensorView got = f.mo.in(dl, f.out.view);
  EXPECT_TRUE(test::untouched_outside(dl, got)) << "bytes outside out's rows changed";
  // Sequence 0 is intact and every row is finite (bad rows read as zeros, never as NaN guard
  // bytes or foreign memory).
  const std::vector<double> all = test::to_doubles(got);
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](double x) { return !std::isfinite(x); }), 0);
}

TEST(PrefillGpu, BadLengthsAreSkippedAndReported) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "bad lengths"));
  {
    FaultSetup f;  // sequence 1 claims more keys than its table row holds
    build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 200 + 100000, 100200 + 200});
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultSeqlenOutOfRange));
  }
  {
    FaultSetup f;  // cu_seqlens_q decreasing, then past total_q
    build_fault_setup(f, rng, {}, {0, 64, 32, 100000}, {0, 200, 400, 600});
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBadCuSeqlens));
  }
  {
    // Packed keys: cu_seqlens_k runs past k's rows.
    FaultSetup f;
    build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 400, 600});
    test::RowBuffer k = test::make_rows(300, f.c.hkv, f.c.d, f.c.dt, 0, 8);
    test::fill_random(k.view, rng);
    const Mirror mk = Mirror::of(k.storage);
    f.args.block_table = TensorView();
    f.args.k = mk.on_device(k.view);
    f.args.v = mk.on_device(k.view);
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBadCuSeqlens));
  }
}

// head_dim 80/96/256 run since issue 18; 192 is still refused.
TEST(PrefillGpu, UnsupportedHeadDimIsAReadableError) {
  Tensor q = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  Tensor k = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  Tensor out = Tensor::zeros({4, 2, 192}, DType::kBF16, kGpu);
  const Tensor cu = test::int_tensor({0, 4}).to(kGpu);
  PrefillArgs a;
  a.q = q.view();
  a.k = k.view();
  a.v = k.view();
  a.cu_seqlens_q = cu.view();
  a.cu_seqlens_k = cu.view();
  a.max_seqlen_q = 4;
  a.max_seqlen_k = 4;
  a.out = out.view();
  try {
    prefill_attention(a);
    FAIL() << "head_dim 192 must be rejected on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported head_dim: 192"), std::string::npos)
        << e.what();
  }
}

// Key tiles entirely left of every row's window are never read: their block-table entries
// are bad ids, which would raise kFaultBlockOutOfRange if they were looked up.
TEST(PrefillGpuFeatures, WindowSkipsTilesBeforeIt) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "window skips tiles"));
  for (int64_t d : {128, 256}) {
    FaultSetup f;
    f.c.d = d;
    // Every sequence: 64 queries over 200 keys, so rows see keys >= 136 - 40 = 96 at most
    // 40 back; blocks 0..4 (keys 0..79) hold bad ids.
    std::vector<int64_t> edits;
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t blk = 0; blk < 5; ++blk) edits.insert(edits.end(), {b, blk, blk % 2 ? -3 : (1 << 28)});
    }
    build_fault_setup(f, rng, edits, {0, 64, 128, 192}, {0, 200, 400, 600});
    f.args.window_left = 40;
    f.args.softcap = 30.0f;
    ASSERT_EQ(clear_faults(), 0u);
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), 0u) << "a key tile left of the window was read";
    const Tensor dl = f.mo.download();
    const TensorView got = f.mo.in(dl, f.out.view);
    EXPECT_TRUE(test::untouched_outside(dl, got)) << "bytes outside out's rows changed";
    const std::vector<double> all = test::to_doubles(got);
    EXPECT_EQ(std::count_if(all.begin(), all.end(), [](double x) { return !std::isfinite(x); }), 0);
    // Without the window the same table is read and reported.
    f.args.window_left = -1;
    prefill_attention(f.args);
    EXPECT_EQ(clear_faults(), static_cast<uint32_t>(kFaultBlockOutOfRange));
  }
}

// Until CudaTuning::fp8_extended_forms is on, float8_e4m3 caches with a window (or softcap,
// ALiBi, head_dim 80/96/256) are refused, by name, before any launch.
TEST(PrefillGpuFeatures, Fp8WithFeaturesIsAReadableErrorWhenOff) {
  const TuningRestore restore;
  cuda::cuda_tuning().fp8_extended_forms = 0;
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  FaultSetup f;
  build_fault_setup(f, rng, {}, {0, 64, 128, 192}, {0, 200, 400, 600});
  Tensor cache8 = Tensor::zeros({f.pk.storage.nbytes() / 2}, DType::kU8, kGpu);
  TensorView k8 = f.args.k, v8 = f.args.v;
  for (TensorView* t : {&k8, &v8}) {
    const int64_t off = static_cast<const char*>(t->data) - static_cast<const char*>(f.mkv.device.data());
    t->data = static_cast<char*>(cache8.data()) + off / 2;
    t->dtype = DType::kF8E4M3;
  }
  f.args.k = k8;
  f.args.v = v8;
  f.args.window_left = 16;
  try {
    prefill_attention(f.args);
    FAIL() << "fp8 caches with a window must be refused on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float8_e4m3 caches together with window_size"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(clear_faults(), 0u);
}

}  // namespace
}  // namespace kvattn
