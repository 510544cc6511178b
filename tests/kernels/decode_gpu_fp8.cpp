// decode_attention over float8_e4m3 caches on the GPU (part of kernels_decode_gpu_test; see
// decode_gpu_test.cpp): the core sweep over quantised caches against the float64 reference on
// the stored bytes, every e4m3 code read exactly, the split kernel's CTA page sweep at head_dim
// 64, the integer conversion and bf16 queries, on both fp8 tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/fp8.h"
#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kernels/cuda/decode/decode_host.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::pick;
using test::uniform_int;

// float8_e4m3 caches: the same sweep (page sizes, GQA, head dims, q_len > 1, plans, unaligned
// caches) over quantised caches, with and without scales.
TEST(DecodeGpu, Fp8CacheSweepAgainstReferenceOnStoredBytes) {
  sweep(test::quick_mode() ? 12 : 96, /*fp8=*/true);
}

// Every finite e4m3 code reads exactly (subnormals and +-448 included): one key per sequence,
// so the output is that key's V row (softmax of one score is 1), and a one-hot query on dim b
// makes sequence b's LSE the K code at dim b times the scale (1). 256 codes over the KV heads;
// the two NaN codes are replaced by zeros of the same sign. (head_dim 256: one KV head, the
// swapped tile.)
void fp8_codes_read_exactly() {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128, 256}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " d " + std::to_string(d));
      const int64_t hkv = 256 / d, B = d, bs = 16;
      Tensor caches = Tensor::empty({2 * bs * hkv * d}, DType::kU8);
      std::memset(caches.data(), 0x7f, static_cast<size_t>(caches.nbytes()));
      auto code = [&](int64_t h, int64_t e) {
        const auto c = static_cast<uint8_t>(h * d + e);
        return (c & 0x7f) == 0x7f ? static_cast<uint8_t>(c & 0x80) : c;
      };
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t e = 0; e < d; ++e) {
          caches.ptr<uint8_t>()[h * d + e] = code(h, e);                            // K, slot 0
          caches.ptr<uint8_t>()[bs * hkv * d + h * d + e] = code(h, d - 1 - e);     // V, slot 0
        }
      }
      Tensor q = Tensor::empty({B, hkv, d}, dt);
      const uint16_t one = dt == DType::kBF16 ? 0x3f80 : 0x3c00;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t e = 0; e < d; ++e) q.ptr<uint16_t>()[(b * hkv + h) * d + e] = e == b ? one : 0;
        }
      }
      const Tensor caches_dev = caches.to(kGpu), q_dev = q.to(kGpu);
      const std::vector<int64_t> shape = {1, bs, hkv, d};
      DecodeArgs a;
      a.q = q_dev;
      a.k_cache = TensorView(caches_dev.data(), DType::kF8E4M3, kGpu, shape);
      a.v_cache = TensorView(caches_dev.ptr<uint8_t>() + bs * hkv * d, DType::kF8E4M3, kGpu, shape);
      const Tensor table = test::int_tensor(std::vector<int64_t>(static_cast<size_t>(B), 0)).to(kGpu);
      const Tensor lens = test::int_tensor(std::vector<int64_t>(static_cast<size_t>(B), 1)).to(kGpu);
      a.block_table = TensorView(table.data(), DType::kI32, kGpu, {B, 1});
      a.cache_seqlens = lens;
      a.softmax_scale = 1.0f;
      Tensor out = Tensor::empty({B, hkv, d}, dt, kGpu);
      Tensor lse = Tensor::empty({hkv, B}, DType::kF32, kGpu);
      a.out = out;
      a.lse = lse;
      decode_attention(a);
      EXPECT_EQ(read_device_faults(kGpu), 0u);
      const std::vector<double> got = test::to_doubles(out.to(Device::cpu()).view());
      const std::vector<double> got_lse = test::to_doubles(lse.to(Device::cpu()).view());
      int wrong = 0, wrong_lse = 0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t e = 0; e < d; ++e) {
            const double want = e4m3_to_float(code(h, d - 1 - e));
            const double x = got[static_cast<size_t>((b * hkv + h) * d + e)];
            if (x != want && wrong++ < 5) ADD_FAILURE() << "V code " << int(code(h, d - 1 - e)) << " read as " << x << ", want " << want;
          }
          const double want = e4m3_to_float(code(h, b));
          const double x = got_lse[static_cast<size_t>(h * B + b)];
          if (!(std::abs(x - want) <= 1e-6 * std::abs(want)) && wrong_lse++ < 5) {
            ADD_FAILURE() << "K code " << int(code(h, b)) << ": LSE " << x << ", want " << want;
          }
        }
      }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(wrong_lse, 0);
    }
  }
}

TEST(DecodeGpu, Fp8CodesReadExactly) { fp8_codes_read_exactly(); }

// The split kernel's CTA page sweep (decode_cta_sweep.cuh) over fp8 caches at head_dim 64, the
// form it exists for: KV head counts whose CTAs hold every head, some of them, or leave warps
// without a unit (5 heads at 4 a CTA: the launcher keeps the per-warp issue there), row chunks
// shared by several warps (group 8 x q_len 3 on the swapped tile's 8-row units), pages that
// split tiles (12, 48) and page 1, empty and short sequences, stream and whole-sequence modes,
// K and V block strides that differ; on both tiles, against the float64 reference on the
// stored bytes.
TEST(DecodeGpu, Fp8CtaSweep) {
  const Variant forms[] = {
      {.name = "cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1},
      {.name = "cta sweep noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .cta_sweep = 1},
      {.name = "cta sweep h4 s4 nosmall", .heads = 4, .stages = 4, .small = 0, .cta_sweep = 1}};
  const bool quick = test::quick_mode();
  const std::vector<int64_t> pages = {16, 1, 12, 48, 256, 32};
  const int64_t before = cuda::decode_host::cta_sweep_launches();
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    for (int c = 0; c < (quick ? 6 : 24); ++c) {
      if (!test::case_selected(c)) continue;
      const uint64_t seed = test::case_seed();
      std::mt19937_64 rng(seed);
      DecodeCase dc;
      dc.d = 64;
      dc.fp8 = true;
      dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.01f, 0.2f});
      dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
      dc.bs = pages[static_cast<size_t>(c) % pages.size()];
      dc.hkv = std::vector<int64_t>{3, 8, 1, 5, 6, 2}[static_cast<size_t>(c / 2) % 6];
      dc.group = pick(rng, std::vector<int64_t>{1, 3, 4, 8});
      if (c % 3 == 1) {
        dc.q_len = pick(rng, std::vector<int64_t>{2, 3});
        dc.causal = uniform_int(rng, 0, 3) != 0;
      }
      const int64_t B = pick(rng, std::vector<int64_t>{1, 5, 40});
      dc.lens = random_lens(rng, B, quick ? 300 : 1500, true);
      dc.plan_mode = static_cast<int>(pick(rng, std::vector<int64_t>{0, 1, 2, 3}));
      dc.forced_splits = static_cast<int>(pick(rng, std::vector<int64_t>{1, 3, 7}));
      dc.with_lse = uniform_int(rng, 0, 1) == 1;
      SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
      check(dc, run_case(dc, rng));
    }
  }
  // The split kernel served some of them by the sweep (the small kernel is off; forced splits
  // of 1 and plans for few sequences may still take the whole-sequence mode, which has it too).
  if (std::getenv("KVATTN_TEST_CASE") == nullptr) {
    EXPECT_GT(cuda::decode_host::cta_sweep_launches(), before) << "no case took the CTA sweep";
  }
}

// Every code, and every output dim in its place (fp8_swap_o_dim), on the swapped fp8 tile.
TEST(DecodeGpu, Fp8CodesReadExactlySwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  fp8_codes_read_exactly();
}

// The integer e4m3 conversion (KVATTN_DECODE_FP8_HW_CVT=0: P V in the query type; the default
// is the hardware conversion, which every other fp8 test runs) on both fp8 tiles and the small
// kernel: every code exact, every output dim in its place, and the fp8 sweep against the
// float64 reference on the stored bytes.
TEST(DecodeGpu, Fp8IntegerConversion) {
  const Variant forms[] = {
      {.name = "fp8 integer cvt", .heads = 8, .stages = 0, .hw_cvt = 0},
      {.name = "fp8 integer cvt swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
       .hw_cvt = 0},
      {.name = "fp8 integer cvt noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .hw_cvt = 0}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    fp8_codes_read_exactly();
    sweep(test::quick_mode() ? 8 : 48, /*fp8=*/true);
  }
}

// bf16 queries kept in bf16 (KVATTN_DECODE_FP8_Q_F16=0; the default rewrites them in f16 per
// warp, a power-of-two prescale folded into the softmax scale, so that K takes the hardware
// conversion too) on both fp8 tiles and the small kernel: the one-hot queries of the codes test
// (every K code through the LSE) and the fp8 sweep against the float64 reference on the
// stored bytes.
TEST(DecodeGpu, Fp8QueriesInBf16) {
  const Variant forms[] = {
      {.name = "fp8 q bf16", .heads = 8, .stages = 0, .q_f16 = 0},
      {.name = "fp8 q bf16 swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1,
       .q_f16 = 0},
      {.name = "fp8 q bf16 noswap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 0,
       .q_f16 = 0}};
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    fp8_codes_read_exactly();
    sweep(test::quick_mode() ? 8 : 48, /*fp8=*/true);
  }
}

// The fp8 sweep again on the swapped fp8 tile (decode_swap 1; small mode off, so the stream and
// whole-sequence kernels take every batch; units of more than 8 rows keep the 16-row tile).
TEST(DecodeGpu, Fp8CacheSweepSwappedTile) {
  UseVariant use(Variant{.name = "swap nosmall", .heads = 8, .stages = 0, .small = 0, .swap = 1});
  sweep(test::quick_mode() ? 12 : 96, /*fp8=*/true);
}

}  // namespace
}  // namespace kvattn
