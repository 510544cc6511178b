// CPU op benchmarks. The first benchmark measures this machine's copy bandwidth (bytes read +
// written by memcpy over buffers far larger than the caches), the second its float32 GEMM
// rate (OpenBLAS sgemm, 2048^3, all cores); every later benchmark reports its own GB/s (or
// GFLOP/s) and its fraction of the matching ceiling as the counter `of_copy` (`of_gemm`).
//   build/bench/cpu_ops_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/prefill_attention.h"
#include "kvattn/kernels/store_kv.h"

namespace {

using namespace kvattn;

double g_copy_bytes_per_s = 0.0;
double g_gemm_flops_per_s = 0.0;

void fill(Tensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  float* p = t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
}

void report(benchmark::State& state, double bytes_per_iter) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_iter * state.iterations()));
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iter * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  if (g_copy_bytes_per_s > 0) {
    state.counters["of_copy"] = benchmark::Counter(
        bytes_per_iter * state.iterations() / g_copy_bytes_per_s, benchmark::Counter::kIsRate);
  }
}

void BM_CopyCeiling(benchmark::State& state) {
  const size_t n = size_t{512} << 20;  // 512 MiB each way
  std::vector<char> a(n, 1), b(n, 2);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  g_copy_bytes_per_s = 2.0 * n * state.iterations() / seconds;
  report(state, 2.0 * n);
}
BENCHMARK(BM_CopyCeiling)->Unit(benchmark::kMillisecond)->Iterations(10)->UseRealTime();

void BM_SgemmCeiling(benchmark::State& state) {
  const int n = 2048;
  std::vector<float> a(size_t{1} * n * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double flops = 2.0 * n * n * n * static_cast<double>(state.iterations());
  g_gemm_flops_per_s = flops / seconds;
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmCeiling)->Unit(benchmark::kMillisecond)->Iterations(10)->UseRealTime();

// store_kv: T tokens, 8 KV heads x 128, f32, random distinct slots in a 256k-slot cache.
void BM_StoreKv(benchmark::State& state) {
  const int64_t tokens = state.range(0), heads = 8, dim = 128, block = 16;
  const int64_t slots = 256 * 1024;
  Tensor k = Tensor::empty({tokens, heads, dim}, DType::kF32);
  Tensor v = Tensor::empty({tokens, heads, dim}, DType::kF32);
  Tensor kc = Tensor::zeros({slots / block, block, heads, dim}, DType::kF32);
  Tensor vc = Tensor::zeros({slots / block, block, heads, dim}, DType::kF32);
  fill(k, 1);
  fill(v, 2);
  std::vector<int64_t> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(3));
  Tensor slot = Tensor::empty({tokens}, DType::kI64);
  std::copy(perm.begin(), perm.begin() + tokens, slot.ptr<int64_t>());
  for (auto _ : state) store_kv(k, v, kc, vc, slot);
  report(state, 2.0 * 2.0 * tokens * heads * dim * 4);  // K and V, read + written
}
BENCHMARK(BM_StoreKv)->Arg(256)->Arg(4096)->Arg(65536)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Paged decode: B sequences x L keys, Hq/Hkv heads, head_dim (the fifth arg), f32, page 16,
// a shuffled block table. Bytes = the whole KV read once.
void BM_Decode(benchmark::State& state) {
  const int64_t seqs = state.range(0), len = state.range(1), hq = state.range(2),
                hkv = state.range(3), block = 16;
  const int64_t dim = state.range(4);
  const int64_t blocks_per_seq = (len + block - 1) / block;
  const int64_t num_blocks = seqs * blocks_per_seq;
  Tensor kc = Tensor::empty({num_blocks, block, hkv, dim}, DType::kF32);
  Tensor vc = Tensor::empty({num_blocks, block, hkv, dim}, DType::kF32);
  fill(kc, 4);
  fill(vc, 5);
  Tensor q = Tensor::empty({seqs, hq, dim}, DType::kF32);
  fill(q, 6);
  Tensor out = Tensor::empty({seqs, hq, dim}, DType::kF32);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(7));
  Tensor table = Tensor::empty({seqs, blocks_per_seq}, DType::kI32);
  std::copy(ids.begin(), ids.end(), table.ptr<int32_t>());
  Tensor lens = Tensor::empty({seqs}, DType::kI32);
  std::fill_n(lens.ptr<int32_t>(), seqs, static_cast<int32_t>(len));
  DecodeArgs a;
  a.q = q;
  a.k_cache = kc;
  a.v_cache = vc;
  a.block_table = table;
  a.cache_seqlens = lens;
  a.out = out;
  for (auto _ : state) decode_attention(a);
  report(state, 2.0 * seqs * len * hkv * dim * 4);
}
BENCHMARK(BM_Decode)
    ->Args({1, 8192, 9, 3, 64})      // one sequence: its items are cut into key pieces
    ->Args({1, 32768, 32, 8, 128})
    ->Args({4, 2048, 9, 3, 64})
    ->Args({64, 4096, 32, 8, 128})
    ->Args({8, 32768, 32, 8, 128})
    ->Args({256, 1024, 16, 8, 128})
    ->Args({16, 4096, 32, 8, 64})
    ->Args({16, 4096, 32, 8, 80})
    ->Args({16, 4096, 32, 8, 96})
    ->Args({16, 4096, 32, 8, 128})
    ->Args({16, 4096, 32, 8, 256})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)->UseRealTime();

// Causal packed prefill: B x S, Hq/Hkv, head_dim (the fifth arg), f32.
// FLOPs = 4 * S*(S+1)/2 * Hq * D.
void BM_Prefill(benchmark::State& state) {
  const int64_t seqs = state.range(0), len = state.range(1), hq = state.range(2),
                hkv = state.range(3);
  const int64_t dim = state.range(4);
  const int64_t total = seqs * len;
  Tensor q = Tensor::empty({total, hq, dim}, DType::kF32);
  Tensor k = Tensor::empty({total, hkv, dim}, DType::kF32);
  Tensor v = Tensor::empty({total, hkv, dim}, DType::kF32);
  Tensor out = Tensor::empty({total, hq, dim}, DType::kF32);
  fill(q, 8);
  fill(k, 9);
  fill(v, 10);
  Tensor cu = Tensor::empty({seqs + 1}, DType::kI32);
  for (int64_t b = 0; b <= seqs; ++b) cu.ptr<int32_t>()[b] = static_cast<int32_t>(b * len);
  PrefillArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.cu_seqlens_q = cu;
  a.cu_seqlens_k = cu;
  a.out = out;
  for (auto _ : state) prefill_attention(a);
  const double flops = 4.0 * seqs * (len * (len + 1) / 2.0) * hq * dim;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  if (g_gemm_flops_per_s > 0) {
    state.counters["of_gemm"] = benchmark::Counter(
        flops * state.iterations() / g_gemm_flops_per_s, benchmark::Counter::kIsRate);
  }
}
BENCHMARK(BM_Prefill)
    ->Args({1, 2048, 9, 3, 64})  // SmolLM2-135M's heads
    ->Args({4, 1024, 32, 8, 128})
    ->Args({2, 1024, 16, 4, 64})
    ->Args({2, 1024, 16, 4, 80})
    ->Args({2, 1024, 16, 4, 96})
    ->Args({2, 1024, 16, 4, 128})
    ->Args({2, 1024, 16, 4, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
