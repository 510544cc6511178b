// A paged decode problem for the CUDA benchmarks (bench/gpu_decode_bench.cu,
// bench/gpu_decode_probe.cu): bf16 caches of head_dim 128 (or another) filled with a fixed pattern, one
// query per sequence, and a block table whose ids are a random permutation (no sequence reads
// contiguous blocks).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "bench_util.cuh"
#include "kvattn/core/tensor.h"
#include "kvattn/kernels/decode_attention.h"

namespace {

// t's elements := the fixed pattern of `seed` (bench_util.cuh).
inline void fill_bf16(const kvattn::Tensor& t, uint32_t seed) {
  fill_random_bf16<<<1024, 256>>>(t.ptr<__nv_bfloat16>(), t.numel(), seed);
  BENCH_CUDA(cudaGetLastError());
}

struct PagedDecodeCase {
  static constexpr int64_t kHeadDim = 128;  // the default
  int64_t head_dim = kHeadDim;
  int64_t num_heads = 0, num_kv_heads = 0, block_size = 0, width = 0;
  double kv_bytes = 0;  // every sequence's cached K and V, read once
  kvattn::Tensor k_cache, v_cache, q, out, block_table, cache_seqlens;

  // The decode arguments without a plan (the caller plans: with width * block_size, or its own
  // bound) and without a workspace.
  kvattn::DecodeArgs args() const {
    kvattn::DecodeArgs a;
    a.q = q;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.block_table = block_table;
    a.cache_seqlens = cache_seqlens;
    a.out = out;
    return a;
  }
};

// Sequences of `lens` keys, `hq` query heads over `hkv` KV heads of `d` dims, pages of
// `block_size`; the block table holds at least `min_table_keys` keys a row (-1 past a
// sequence's pages), as an engine's table sized for its longest context.
inline PagedDecodeCase make_paged_decode_case(const std::vector<int64_t>& lens, int64_t hq,
                                              int64_t hkv, int64_t block_size,
                                              std::mt19937_64& rng,
                                              int64_t d = PagedDecodeCase::kHeadDim,
                                              int64_t min_table_keys = 0) {
  using kvattn::DType;
  using kvattn::Tensor;
  const kvattn::Device gpu = kvattn::Device::cuda(0);
  PagedDecodeCase c;
  c.head_dim = d;
  c.num_heads = hq;
  c.num_kv_heads = hkv;
  c.block_size = block_size;
  const auto B = static_cast<int64_t>(lens.size());
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  c.width = (std::max(max_len, min_table_keys) + block_size - 1) / block_size;
  int64_t num_blocks = 0;
  for (int64_t l : lens) num_blocks += (l + block_size - 1) / block_size;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(B * c.width), -1);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < (lens[b] + block_size - 1) / block_size; ++i) {
      table[static_cast<size_t>(b * c.width + i)] = ids[next++];
    }
  }
  const std::vector<int32_t> lens32(lens.begin(), lens.end());
  c.k_cache = Tensor::empty({num_blocks, block_size, hkv, d}, DType::kBF16, gpu);
  c.v_cache = Tensor::empty({num_blocks, block_size, hkv, d}, DType::kBF16, gpu);
  c.q = Tensor::empty({B, hq, d}, DType::kBF16, gpu);
  c.out = Tensor::empty({B, hq, d}, DType::kBF16, gpu);
  c.block_table = Tensor::empty({B, c.width}, DType::kI32, gpu);
  c.cache_seqlens = Tensor::empty({B}, DType::kI32, gpu);
  fill_bf16(c.k_cache, 3);
  fill_bf16(c.v_cache, 4);
  fill_bf16(c.q, 5);
  BENCH_CUDA(cudaMemcpy(c.block_table.data(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(c.cache_seqlens.data(), lens32.data(), lens32.size() * 4,
                        cudaMemcpyHostToDevice));
  for (int64_t l : lens) c.kv_bytes += 2.0 * l * hkv * d * 2;
  return c;
}

}  // namespace
