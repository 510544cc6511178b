// decode_attention on the GPU given bad input (part of kernels_decode_gpu_test; see
// decode_gpu_test.cpp): bad block ids and lengths caught by the fault word under every copy
// issue, and the shapes refused by name before any launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/error.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kernels/cuda/tuning.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::Mirror;

// Bad block ids and lengths: the kernel never touches memory outside the cache (memcheck
// proves it), records the fault bits, and the healthy sequences still come out right.
// fp8_d64: over an fp8 cache at head_dim 64 with 3 KV heads (the CTA sweep's case), the
// reference on the stored bytes.
void bad_indices(bool fp8_d64 = false) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, std::string("bad block ids and cache_seqlens") +
                                            (fp8_d64 ? ", fp8 d64" : "")));
  const int64_t hkv = fp8_d64 ? 3 : 2, group = 4, d = fp8_d64 ? 64 : 128, bs = 16;
  const int64_t H = hkv * group;
  const std::vector<int64_t> lens = {100, 200, 50, 300};
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  Fp8Caches f8;
  if (fp8_d64) f8 = quantise_caches(rng, r.k, r.v, 0.0f, /*aligned=*/true);
  test::RowBuffer qb = test::make_rows(4, H, d, DType::kBF16, 0);
  test::fill_uniform(qb.view, rng);
  Tensor lens_t = test::int_tensor(lens);
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  const test::RefAttention ref =
      fp8_d64 ? test::decode_reference(qb.view, f8.k_ref, f8.v_ref, kv.block_table, lens_t, 1,
                                       scale, true)
              : test::decode_reference(qb.view, r.k, r.v, kv.block_table, lens_t, 1, scale, true);

  for (int mode = 0; mode < 2; ++mode) {
    // Corrupt sequence 1's table (mode 0) or sequence 1's and 3's lengths (mode 1).
    Tensor table = Tensor::empty({kv.table_storage.nbytes()}, DType::kU8);
    std::memcpy(table.data(), kv.table_storage.data(), static_cast<size_t>(table.nbytes()));
    TensorView table_view = kv.block_table;
    table_view.data = table.data();
    std::vector<int64_t> bad_lens = lens;
    const int64_t row = kv.block_table.stride(0);
    if (mode == 0) {
      table.ptr<int32_t>()[row * 1 + 3] = static_cast<int32_t>(kv.k_cache.size(0) + 7);
      table.ptr<int32_t>()[row * 1 + 5] = -3;
    } else {
      bad_lens[1] = kv.block_table.size(1) * bs + 50;  // past the table's capacity
      bad_lens[3] = -5;
    }
    Tensor bad_lens_t = test::int_tensor(bad_lens);
    const Mirror caches = Mirror::of(fp8_d64 ? f8.storage : r.storage);
    const Mirror tbl = Mirror::of(table);
    const Tensor q = qb.storage.to(kGpu);
    test::RowBuffer ob = test::make_rows(4, H, d, DType::kBF16, 0);
    const Mirror out = Mirror::of(ob.storage);
    const Tensor lens_dev = bad_lens_t.to(kGpu);
    for (int splits : {1, 5}) {
      DecodeArgs a;
      a.q = TensorView(q.data(), DType::kBF16, kGpu, {4, H, d});
      a.k_cache = caches.on_device(fp8_d64 ? f8.k : r.k);
      a.v_cache = caches.on_device(fp8_d64 ? f8.v : r.v);
      a.block_table = tbl.on_device(table_view);
      a.cache_seqlens = lens_dev;
      a.out = out.on_device(ob.view);
      Tensor ws;
      if (splits > 1) {
        const int64_t bytes = splits * 4 * H * (d + 1) * 4;
        ws = Tensor::empty({bytes}, DType::kU8, kGpu);
        a.plan = DecodePlan{splits, bytes};
        a.workspace = ws;
      }
      ASSERT_EQ(read_device_faults(kGpu), 0u);
      ASSERT_NO_THROW(decode_attention(a));
      const uint32_t faults = read_device_faults(kGpu);
      if (mode == 0) {
        EXPECT_TRUE(faults & kFaultBlockOutOfRange) << "faults " << faults << " splits " << splits;
      } else {
        EXPECT_TRUE(faults & kFaultSeqlenOutOfRange) << "faults " << faults << " splits " << splits;
      }
      const Tensor back = out.download();
      const auto got = test::to_doubles(out.in(back, ob.view));
      const size_t n = static_cast<size_t>(H * d);
      for (int64_t b : {int64_t{0}, int64_t{2}}) {  // untouched sequences
        std::vector<double> g(got.begin() + b * n, got.begin() + (b + 1) * n);
        std::vector<double> w(ref.out.begin() + b * n, ref.out.begin() + (b + 1) * n);
        const auto e = test::compare(g, w);
        EXPECT_FALSE(e.has_nan) << "sequence " << b << " mode " << mode << " splits " << splits;
        EXPECT_LT(e.rel_l2, 1e-2) << "sequence " << b << " mode " << mode << " splits " << splits;
      }
      if (mode == 0) {
        // Bad block ids read as zero rows: sequence 1 stays finite (its other keys are real).
        for (size_t i = n; i < 2 * n; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << "sequence 1, splits " << splits;
        }
      } else {
        // A negative length is clamped to 0: zeros. (Sequence 1, clamped to the table's
        // capacity, reads in-bounds slots no key was written to: garbage, not checked.)
        for (size_t i = 3 * n; i < 4 * n; ++i) {
          ASSERT_EQ(got[i], 0.0) << "sequence 3 (cache_seqlens -5), splits " << splits;
        }
      }
    }
  }
}

TEST(DecodeGpu, BadIndicesAreCaughtByTheFaultWord) {
  // Every form of the copy issue checks the block ids (the case's pages of 16 at head_dim 128
  // are the TMA form's where the device has it), and the default's pick among them.
  const Variant forms[] = {{.name = "default issue", .heads = 8, .stages = 0},
                           {.name = "copy issue", .heads = 8, .stages = 0, .lean_issue = 0,
                            .tma = 0},
                           {.name = "lean issue", .heads = 8, .stages = 0, .lean_issue = 1,
                            .tma = 0},
                           {.name = "tma issue", .heads = 8, .stages = 0, .tma = 1},
                           {.name = "tma issue swap nosmall", .heads = 8, .stages = 0,
                            .small = 0, .swap = 1, .tma = 1}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    bad_indices();
  }
  // The split kernel's CTA sweep (fp8 d64) and the lean issue it stands beside there.
  const Variant fp8_forms[] = {{.name = "lean issue fp8 d64", .heads = 8, .stages = 0,
                                .small = 0, .lean_issue = 1, .cta_sweep = 0},
                               {.name = "cta sweep fp8 d64", .heads = 8, .stages = 0,
                                .small = 0, .cta_sweep = 1}};
  for (const Variant& v : fp8_forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    bad_indices(/*fp8_d64=*/true);
  }
}

// A one-key decode over a bf16 query and a cache of `cache_dtype` at head_dim d must throw an
// Error whose message holds `expected`, before any launch.
void expect_decode_refused(DType cache_dtype, int64_t d, const std::string& expected) {
  std::mt19937_64 rng(test::case_seed());
  const std::vector<int64_t> lens = {10};
  test::PagedKv kv = test::make_paged_kv(rng, cache_dtype, 1, d, 16, lens);
  const Mirror caches = Mirror::of(kv.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Tensor q = Tensor::zeros({1, 1, d}, DType::kBF16, kGpu);
  const Tensor out = Tensor::empty({1, 1, d}, DType::kBF16, kGpu);
  const Tensor lens_dev = test::int_tensor(lens).to(kGpu);
  DecodeArgs a;
  a.q = q;
  a.k_cache = caches.on_device(kv.k_cache);
  a.v_cache = caches.on_device(kv.v_cache);
  a.block_table = tbl.on_device(kv.block_table);
  a.cache_seqlens = lens_dev;
  a.out = out;
  a.plan = DecodePlan{1, 0};
  try {
    decode_attention(a);
    ADD_FAILURE() << "no error; expected one holding: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// fp8 at head_dim 256 is refused by name while CudaTuning::fp8_extended_forms is off (on by
// default, so every other case here runs with it).
TEST(DecodeGpu, Fp8HeadDim256IsAReadableErrorWhenOff) {
  UseVariant off(Variant{.name = "default", .heads = 8, .stages = 0});
  cuda::cuda_tuning().fp8_extended_forms = 0;  // restored with the rest by `off`
  expect_decode_refused(DType::kF8E4M3, 256, "head_dim 256 over a float8_e4m3 cache");
}

TEST(DecodeGpu, UnsupportedHeadDimIsAReadableError) {
  expect_decode_refused(DType::kBF16, 72, "unsupported head_dim: 72");
}

}  // namespace
}  // namespace kvattn
