// dequant_fp8_pages (the cascade decode's shared-prefix pass over an fp8 cache on the GPU)
// against a host model, bit for bit: every e4m3 code (the NaN codes read +-480, as the CUDA
// attention kernels read them), each scaled in float and rounded once to bf16 or fp16 (scale
// undefined: the exact value); pages 1/16/256 in a shuffled block table whose bad ids (-1, past
// the pool) give zero rows; key counts that end inside a page; head_dim 64/128/256; a block
// stride with a gap. The output starts poisoned, and nothing past num_keys rows is written.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/fp8_dequant_pages.h"
#include "kernels/gpu_test_support.h"
#include "kvattn/core/dtype.h"
#include "kvattn/core/fp8.h"
#include "support/case_util.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using test::pick;
using test::uniform_int;

// The GPU's reading of a code: e4m3_to_float, except the NaN codes (+-480, fp8_convert.cuh).
float gpu_code_value(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return (code & 0x80) != 0 ? -480.0f : 480.0f;
  return e4m3_to_float(code);
}

uint16_t round_to(DType dt, float x) {
  return dt == DType::kBF16 ? float_to_bf16(x).bits : float_to_f16(x).bits;
}

TEST(Fp8DequantPagesGpu, MatchesTheHostModelBitForBit) {
  const int cases = test::quick_mode() ? 6 : 40;
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = test::case_seed() + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    const int64_t bs = pick<int64_t>(rng, {1, 16, 256});
    const int64_t heads = uniform_int(rng, 1, 8);
    const int64_t d = pick<int64_t>(rng, {64, 128, 256});
    const int64_t num_blocks = uniform_int(rng, 2, bs == 256 ? 6 : 40);
    const int64_t gap = pick<int64_t>(rng, {0, 8, 64});  // bytes between blocks, past the data
    const int64_t stride = bs * heads * d + gap;
    const DType out_dt = pick<DType>(rng, {DType::kBF16, DType::kF16});
    const bool scaled = pick<int>(rng, {0, 1}) == 1;
    SCOPED_TRACE(testing::Message() << "case " << i << " seed " << seed << " bs " << bs
                                    << " heads " << heads << " d " << d << " blocks "
                                    << num_blocks << " gap " << gap << " scaled " << scaled);

    // The pool: random codes (every code value likely), one allocation with the gaps.
    std::vector<uint8_t> pool(static_cast<size_t>(num_blocks * stride));
    for (auto& b : pool) b = static_cast<uint8_t>(rng() & 0xff);
    // The table: a shuffled permutation of the pool plus bad ids.
    std::vector<int32_t> table(static_cast<size_t>(num_blocks + 2));
    std::iota(table.begin(), table.begin() + num_blocks, 0);
    std::shuffle(table.begin(), table.begin() + num_blocks, rng);
    table[static_cast<size_t>(uniform_int(rng, 0, num_blocks - 1))] = -1;
    table[static_cast<size_t>(num_blocks)] = static_cast<int32_t>(num_blocks);  // past the pool
    table[static_cast<size_t>(num_blocks + 1)] = 0;
    const int64_t max_keys = static_cast<int64_t>(table.size()) * bs;
    const int64_t num_keys = uniform_int(rng, 1, max_keys);
    std::vector<float> scale(static_cast<size_t>(heads));
    for (auto& s : scale) s = std::uniform_real_distribution<float>(0.001f, 3.0f)(rng);

    // Device copies. The cache view: [num_blocks, bs, heads, d] with block stride `stride`.
    void *d_pool = nullptr, *d_table = nullptr, *d_scale = nullptr, *d_out = nullptr;
    const int64_t out_elems = (num_keys + 3) * heads * d;  // 3 rows of guard past the end
    ASSERT_EQ(cudaMalloc(&d_pool, pool.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_table, table.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_scale, scale.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, static_cast<size_t>(out_elems) * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_pool, pool.data(), pool.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_scale, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(d_out, 0xA5, static_cast<size_t>(out_elems) * 2), cudaSuccess);  // poison
    const Device gpu = Device::cuda(0);
    const TensorView cache(d_pool, DType::kF8E4M3, gpu, {num_blocks, bs, heads, d},
                           {stride, heads * d, d, 1});
    const TensorView ids(d_table, DType::kI32, gpu, {static_cast<int64_t>(table.size())});
    const TensorView sc = scaled ? TensorView(d_scale, DType::kF32, gpu, {heads}) : TensorView();
    const TensorView out(d_out, out_dt, gpu, {num_keys, heads, d});
    cuda::dequant_fp8_pages(cache, ids, num_keys, sc, out, Stream{});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(static_cast<size_t>(out_elems));
    ASSERT_EQ(cudaMemcpy(got.data(), d_out, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);

    int64_t bad = 0;
    for (int64_t j = 0; j < num_keys && bad < 5; ++j) {
      const int32_t blk = table[static_cast<size_t>(j / bs)];
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t e = 0; e < d; ++e) {
          uint16_t want = 0;
          if (blk >= 0 && blk < num_blocks) {
            const uint8_t code =
                pool[static_cast<size_t>(blk * stride + ((j % bs) * heads + h) * d + e)];
            const float v = gpu_code_value(code);
            want = round_to(out_dt, scaled ? v * scale[static_cast<size_t>(h)] : v);
          }
          const uint16_t g = got[static_cast<size_t>((j * heads + h) * d + e)];
          if (g != want) {
            ADD_FAILURE() << "key " << j << " head " << h << " dim " << e << ": got 0x"
                          << std::hex << g << ", want 0x" << want << std::dec;
            ++bad;
          }
        }
      }
    }
    for (int64_t k = num_keys * heads * d; k < out_elems; ++k) {
      ASSERT_EQ(got[static_cast<size_t>(k)], 0xA5A5) << "written past num_keys rows at " << k;
    }
    cudaFree(d_pool);
    cudaFree(d_table);
    cudaFree(d_scale);
    cudaFree(d_out);
  }
}

TEST(Fp8DequantPagesGpu, RejectsBadArguments) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 16), cudaSuccess);
  const Device gpu = Device::cuda(0);
  const TensorView cache(p, DType::kF8E4M3, gpu, {4, 16, 2, 64});
  const TensorView ids(p, DType::kI32, gpu, {4});
  const TensorView out(p, DType::kBF16, gpu, {64, 2, 64});
  const TensorView bf16_cache(p, DType::kBF16, gpu, {4, 16, 2, 64});
  EXPECT_THROW(cuda::dequant_fp8_pages(bf16_cache, ids, 64, TensorView(), out, Stream{}), Error);
  EXPECT_THROW(cuda::dequant_fp8_pages(cache, ids, 65, TensorView(), out, Stream{}), Error);
  const TensorView f32_out(p, DType::kF32, gpu, {64, 2, 64});
  EXPECT_THROW(cuda::dequant_fp8_pages(cache, ids, 64, TensorView(), f32_out, Stream{}), Error);
  const TensorView odd(p, DType::kF8E4M3, gpu, {4, 16, 2, 60});
  const TensorView odd_out(p, DType::kBF16, gpu, {64, 2, 60});
  EXPECT_THROW(cuda::dequant_fp8_pages(odd, ids, 64, TensorView(), odd_out, Stream{}), Error);
  cudaFree(p);
}

}  // namespace
}  // namespace kvattn

KVATTN_GPU_TEST_MAIN()
