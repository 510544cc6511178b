// CUDA prefill with issue 18's features, through the public prefill_attention (bf16, one
// sequence, 32 query / 8 KV heads, packed keys): head_dim 64/80/96/128/256 causal, and a
// 4096-key sliding window over 32k keys against a plain 4096-key context with the same
// visible pairs. Calls with a window, softcap, ALiBi or head_dim 80/96/256 run the extended
// mma.sync kernel (prefill_kernel.cuh, kExt); the others the default path (the Hopper kernel on
// an H200). "ext" rows force the extended kernel on a plain shape (a window wider than the
// sequence: no mask, same result), so the two kernels compare on one shape.
// Timing: median of --reps CUDA-event timed calls, L2 flushed (memset) before each, after
// do_bench's warm-up (bench_util.cuh). FLOPs = 4 * visible (q, k) pairs * heads * head_dim.
// One JSON line per row on stdout, then a table.
//
//   gpu_prefill_features_bench [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "kvattn/kernels/prefill_attention.h"

namespace {

using namespace kvattn;

struct Case {
  std::string name;
  int64_t lq, lk, d;
  bool causal;
  int64_t window_left;  // -1: none
  float softcap;
};

// Visible (q, k) pairs of one sequence (bottom-right aligned causal, left window).
double visible_pairs(const Case& c) {
  double pairs = 0;
  for (int64_t i = 0; i < c.lq; ++i) {
    const int64_t diag = i + c.lk - c.lq;
    const int64_t hi = c.causal ? std::min(c.lk, diag + 1) : c.lk;
    const int64_t lo = c.window_left >= 0 ? std::max<int64_t>(0, diag - c.window_left) : 0;
    pairs += static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  return pairs;
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(int64_t bytes) { BENCH_CUDA(cudaMalloc(&p, std::max<int64_t>(bytes, 16))); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
  }
  const int64_t hq = 32, hkv = 8;
  const int64_t kWide = int64_t{1} << 30;  // a window past every sequence: the extended kernel, no mask
  const std::vector<Case> cases = {
      {"causal 4096 d64", 4096, 4096, 64, true, -1, 0.0f},
      {"causal 4096 d80", 4096, 4096, 80, true, -1, 0.0f},
      {"causal 4096 d96", 4096, 4096, 96, true, -1, 0.0f},
      {"causal 4096 d128", 4096, 4096, 128, true, -1, 0.0f},
      {"causal 4096 d128 ext", 4096, 4096, 128, true, kWide, 0.0f},
      {"causal 4096 d256", 4096, 4096, 256, true, -1, 0.0f},
      {"causal 4096 d256 softcap", 4096, 4096, 256, true, -1, 50.0f},
      {"non-causal 4096x4096 d128", 4096, 4096, 128, false, -1, 0.0f},
      {"non-causal 4096x4096 d128 ext", 4096, 4096, 128, false, kWide, 0.0f},
      {"4096 q, 32k keys, window 4096", 4096, 32768, 128, true, 4095, 0.0f},
      {"4096 q, 32k keys, no window", 4096, 32768, 128, true, -1, 0.0f},
      {"causal 32k, window 4096", 32768, 32768, 128, true, 4095, 0.0f},
      {"causal 32k, window 4096 d256", 32768, 32768, 256, true, 4095, 0.0f},
  };
  init_l2_flush();
  struct Row {
    std::string name;
    double us, tflops;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    const int64_t es = 2;
    Buffer q(c.lq * hq * c.d * es), k(c.lk * hkv * c.d * es), v(c.lk * hkv * c.d * es),
        out(c.lq * hq * c.d * es), cu(8 * sizeof(int32_t));
    fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(q.p), c.lq * hq * c.d, 1);
    fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(k.p), c.lk * hkv * c.d, 2);
    fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(v.p), c.lk * hkv * c.d, 3);
    const int32_t cu_host[4] = {0, static_cast<int32_t>(c.lq), 0, static_cast<int32_t>(c.lk)};
    BENCH_CUDA(cudaMemcpy(cu.p, cu_host, sizeof(cu_host), cudaMemcpyHostToDevice));
    const Device gpu = Device::cuda(0);
    PrefillArgs a;
    a.q = TensorView(q.p, DType::kBF16, gpu, {c.lq, hq, c.d}, {hq * c.d, c.d, 1});
    a.k = TensorView(k.p, DType::kBF16, gpu, {c.lk, hkv, c.d}, {hkv * c.d, c.d, 1});
    a.v = TensorView(v.p, DType::kBF16, gpu, {c.lk, hkv, c.d}, {hkv * c.d, c.d, 1});
    a.out = TensorView(out.p, DType::kBF16, gpu, {c.lq, hq, c.d}, {hq * c.d, c.d, 1});
    a.cu_seqlens_q = TensorView(cu.p, DType::kI32, gpu, {2}, {1});
    a.cu_seqlens_k = TensorView(static_cast<int32_t*>(cu.p) + 2, DType::kI32, gpu, {2}, {1});
    a.max_seqlen_q = c.lq;
    a.max_seqlen_k = c.lk;
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.softcap = c.softcap;
    const double us = median_us([&] { prefill_attention(a); }, Flush::kMemset, reps);
    const double flops = 4.0 * visible_pairs(c) * hq * c.d;
    rows.push_back({c.name, us, flops / us * 1e-6});
    std::printf("{\"bench\":\"prefill_features\",\"case\":\"%s\",\"lq\":%lld,\"lk\":%lld,\"d\":%lld,"
                "\"causal\":%d,\"window_left\":%lld,\"softcap\":%g,\"heads\":\"%lld/%lld\","
                "\"us\":%.1f,\"tflops\":%.1f}\n",
                c.name.c_str(), static_cast<long long>(c.lq), static_cast<long long>(c.lk),
                static_cast<long long>(c.d), c.causal ? 1 : 0,
                static_cast<long long>(c.window_left), c.softcap, static_cast<long long>(hq),
                static_cast<long long>(hkv), us, flops / us * 1e-6);
  }
  std::printf("\n%-34s %10s %9s\n", "case (bf16, 32/8 heads, packed)", "us", "TFLOP/s");
  for (const Row& r : rows) std::printf("%-34s %10.1f %9.1f\n", r.name.c_str(), r.us, r.tflops);
  auto find = [&](const char* name) {
    for (const Row& r : rows) {
      if (r.name == name) return r.us;
    }
    return 0.0;
  };
  std::printf("\nwindow 4096 over 32k keys / non-causal 4096x4096 (same pairs): %.2fx (ext kernel: %.2fx)\n",
              find("4096 q, 32k keys, window 4096") / find("non-causal 4096x4096 d128"),
              find("4096 q, 32k keys, window 4096") / find("non-causal 4096x4096 d128 ext"));
  std::printf("head_dim 80 / 128: %.2fx, 96 / 128: %.2fx (128 on the default path)\n",
              find("causal 4096 d80") / find("causal 4096 d128"),
              find("causal 4096 d96") / find("causal 4096 d128"));
  return 0;
}
