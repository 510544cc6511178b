// Host cost of one decode_attention call from C++: the time to validate, plan and enqueue
// (no synchronization inside the timed loop). The baseline of bench/python_overhead.py, which
// times kvattn.flash_attn_with_kvcache on the same shape from Python.
//
// Calls are timed in chunks (default 100 calls per chunk, 2000 in all) with a device sync
// between chunks outside the timing, so the launch queue never fills and the GPU's speed does
// not leak into the figure. Two variants:
//   library_plan: DecodeArgs.plan = {0, 0} (the library plans and uses its own workspace),
//                 what a C++ caller writes by default;
//   own_plan:     plan_decode once, a caller-owned workspace (the CUDA-graph form).
// Prints a table and one JSON object (also written to --json PATH).
//   decode_call_overhead [--batch 64] [--heads 32] [--kv-heads 8] [--head-dim 128]
//                        [--block-size 16] [--context 1024] [--calls 2000] [--chunk 100]
//                        [--json PATH]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"
#include "kvattn/kernels/decode_attention.h"
#include "bench_util.cuh"

namespace {

using kvattn::DType;
using kvattn::Tensor;

struct Options {
  int64_t batch = 64, heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  int64_t context = 1024;
  int calls = 2000, chunk = 100;
  std::string json;
};

struct Stats {
  double median_us = 0, min_us = 0, mean_us = 0;
};

// Per-call microseconds of `fn` over `calls` calls in chunks, syncing between chunks.
template <typename Fn>
Stats time_calls(const Options& o, Fn&& fn) {
  for (int i = 0; i < 50; ++i) fn();  // warm-up
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<double> per_call;
  for (int done = 0; done < o.calls; done += o.chunk) {
    const int n = std::min(o.chunk, o.calls - done);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    BENCH_CUDA(cudaDeviceSynchronize());
    per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  std::sort(per_call.begin(), per_call.end());
  Stats s;
  s.median_us = per_call[per_call.size() / 2];
  s.min_us = per_call.front();
  double sum = 0;
  for (double v : per_call) sum += v;
  s.mean_us = sum / static_cast<double>(per_call.size());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--batch") o.batch = std::atoll(next());
    else if (a == "--heads") o.heads = std::atoll(next());
    else if (a == "--kv-heads") o.kv_heads = std::atoll(next());
    else if (a == "--head-dim") o.head_dim = std::atoll(next());
    else if (a == "--block-size") o.block_size = std::atoll(next());
    else if (a == "--context") o.context = std::atoll(next());
    else if (a == "--calls") o.calls = std::atoi(next());
    else if (a == "--chunk") o.chunk = std::atoi(next());
    else if (a == "--json") o.json = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("decode_call_overhead: no CUDA device, skipped\n");
    return 77;
  }
  const kvattn::Device gpu = kvattn::Device::cuda(0);
  const int64_t blocks_per_seq = (o.context + o.block_size - 1) / o.block_size;
  const int64_t num_blocks = o.batch * blocks_per_seq;

  const Tensor q = Tensor::empty({o.batch, o.heads, o.head_dim}, DType::kBF16, gpu);
  const Tensor out = Tensor::empty({o.batch, o.heads, o.head_dim}, DType::kBF16, gpu);
  const Tensor k_cache =
      Tensor::empty({num_blocks, o.block_size, o.kv_heads, o.head_dim}, DType::kBF16, gpu);
  const Tensor v_cache =
      Tensor::empty({num_blocks, o.block_size, o.kv_heads, o.head_dim}, DType::kBF16, gpu);
  BENCH_CUDA(cudaMemset(q.data(), 0, q.nbytes()));
  BENCH_CUDA(cudaMemset(k_cache.data(), 0, k_cache.nbytes()));
  BENCH_CUDA(cudaMemset(v_cache.data(), 0, v_cache.nbytes()));
  Tensor table_h = Tensor::empty({o.batch, blocks_per_seq}, DType::kI32);
  for (int64_t i = 0; i < num_blocks; ++i) table_h.ptr<int32_t>()[i] = static_cast<int32_t>(i);
  Tensor lens_h = Tensor::empty({o.batch}, DType::kI32);
  for (int64_t b = 0; b < o.batch; ++b) lens_h.ptr<int32_t>()[b] = static_cast<int32_t>(o.context);
  const Tensor table = table_h.to(gpu);
  const Tensor lens = lens_h.to(gpu);

  kvattn::DecodeArgs a;
  a.q = q;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.block_table = table;
  a.cache_seqlens = lens;
  a.q_len = 1;
  a.softmax_scale = 0.0f;
  a.causal = true;
  a.out = out;
  a.stream = kvattn::Stream{};  // the legacy default stream: torch's default current stream

  a.plan = kvattn::DecodePlan{0, 0};
  const Stats lib = time_calls(o, [&] { kvattn::decode_attention(a); });

  kvattn::DecodeArgs b = a;
  b.plan = kvattn::plan_decode(o.batch, o.heads, o.kv_heads, o.head_dim, 1,
                               blocks_per_seq * o.block_size, gpu);
  Tensor ws;
  if (b.plan.workspace_bytes > 0) {
    ws = Tensor::empty({b.plan.workspace_bytes}, DType::kU8, gpu);
    b.workspace = ws;
  }
  const Stats own = time_calls(o, [&] { kvattn::decode_attention(b); });

  std::printf("decode_call_overhead: batch %lld, heads %lld/%lld, head_dim %lld, block %lld, "
              "context %lld, bf16, %d calls in chunks of %d\n",
              static_cast<long long>(o.batch), static_cast<long long>(o.heads),
              static_cast<long long>(o.kv_heads), static_cast<long long>(o.head_dim),
              static_cast<long long>(o.block_size), static_cast<long long>(o.context), o.calls,
              o.chunk);
  std::printf("  %-34s %9s %9s %9s\n", "C++ variant", "median", "min", "mean");
  std::printf("  %-34s %7.2fus %7.2fus %7.2fus\n", "decode_attention (library plan)",
              lib.median_us, lib.min_us, lib.mean_us);
  std::printf("  %-34s %7.2fus %7.2fus %7.2fus  (num_splits %d, workspace %lld B)\n",
              "decode_attention (own plan)", own.median_us, own.min_us, own.mean_us,
              b.plan.num_splits, static_cast<long long>(b.plan.workspace_bytes));
  char json[1024];
  std::snprintf(json, sizeof(json),
                "{\"op\": \"decode_call_overhead\", \"batch\": %lld, \"heads\": %lld, "
                "\"kv_heads\": %lld, \"head_dim\": %lld, \"block_size\": %lld, \"context\": %lld, "
                "\"calls\": %d, \"chunk\": %d, \"library_plan_us\": %.3f, "
                "\"library_plan_min_us\": %.3f, \"own_plan_us\": %.3f, \"own_plan_min_us\": %.3f, "
                "\"num_splits\": %d, \"workspace_bytes\": %lld}",
                static_cast<long long>(o.batch), static_cast<long long>(o.heads),
                static_cast<long long>(o.kv_heads), static_cast<long long>(o.head_dim),
                static_cast<long long>(o.block_size), static_cast<long long>(o.context), o.calls,
                o.chunk, lib.median_us, lib.min_us, own.median_us, own.min_us, b.plan.num_splits,
                static_cast<long long>(b.plan.workspace_bytes));
  std::printf("%s\n", json);
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f, "%s\n", json);
    std::fclose(f);
  }
  return 0;
}
