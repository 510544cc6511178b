// Shared by the CUDA benchmarks (bench/*.cu, one translation unit each): the CUDA error check
// that aborts the run, and the bf16 fill with a fixed hash pattern in [-1, 1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

// Evaluates a CUDA runtime call; on an error prints where and what, and exits 1.
#define BENCH_CUDA(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,           \
                   cudaGetErrorString(e_));                                               \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

// p[i] = a hash of (i, seed) mapped to [-1, 1) in steps of 2^-23, rounded to bf16.
__global__ void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f);
  }
}

// How L2 is emptied before each timed rep: a 256 MB memset (dirty lines, as triton's do_bench
// does, so a figure compares with the peers') or a 256 MB read (clean lines: the kernel alone).
enum class Flush { kNone, kMemset, kRead };

constexpr size_t kFlushBytes = size_t{256} << 20;
inline void* g_flush_buffer = nullptr;

inline void init_l2_flush() {
  if (g_flush_buffer != nullptr) return;
  BENCH_CUDA(cudaMalloc(&g_flush_buffer, kFlushBytes));
  BENCH_CUDA(cudaMemset(g_flush_buffer, 0, kFlushBytes));
}

__global__ void read_flush(const int4* p, int64_t n, int* sink) {
  int acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *sink = acc;  // keeps the loads alive
}

inline void flush_l2(Flush flush, int rep) {
  if (flush == Flush::kMemset) BENCH_CUDA(cudaMemsetAsync(g_flush_buffer, rep & 0xff, kFlushBytes));
  if (flush == Flush::kRead) {
    read_flush<<<1024, 256>>>(static_cast<const int4*>(g_flush_buffer), kFlushBytes / 16,
                              static_cast<int*>(g_flush_buffer));
  }
}

inline const char* flush_name(Flush f) {
  return f == Flush::kNone ? "no flush" : (f == Flush::kMemset ? "L2 flush: memset" : "L2 flush: read");
}

// Median time in microseconds of fn() over `reps` reps (CUDA events around each call, L2
// emptied by `flush` before each; init_l2_flush() first), after at least `warmup` untimed
// calls and 25 ms of them: do_bench's warm-up, so that kvattn and the peers are timed alike.
template <typename Fn>
double median_us(Fn&& fn, Flush flush, int reps, int warmup = 10) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    fn();
    if (i + 1 >= warmup && i % 16 == 15) {
      BENCH_CUDA(cudaDeviceSynchronize());
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(25)) break;
    }
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(reps));
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r) {
    flush_l2(flush, r);
    BENCH_CUDA(cudaEventRecord(ev[2 * r]));
    fn();
    BENCH_CUDA(cudaEventRecord(ev[2 * r + 1]));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) BENCH_CUDA(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
  for (auto& e : ev) BENCH_CUDA(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

// Graph of `iters` calls of fn(i, stream); min time per call over 5 replays, in us.
inline double time_graph(cudaStream_t st, int iters,
                          const std::function<void(int, cudaStream_t)>& fn) {
  fn(0, st);  // first-call work (cuBLASLt plans, attributes) outside the capture
  BENCH_CUDA(cudaStreamSynchronize(st));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < iters; ++i) fn(i, st);
  BENCH_CUDA(cudaStreamEndCapture(st, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  BENCH_CUDA(cudaGraphLaunch(exec, st));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, st));
    BENCH_CUDA(cudaGraphLaunch(exec, st));
    BENCH_CUDA(cudaEventRecord(e1, st));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return best * 1e3 / iters;
}

// The copy ceiling: a 1 GB device-to-device copy on `st` (best of 5 after one untimed), in
// GB/s counting read + write bytes.
inline double measure_copy_gbps(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemsetAsync(a, 1, bytes, st));
  float best = 1e30f;
  for (int r = 0; r < 6; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, st));
    BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
    BENCH_CUDA(cudaEventRecord(e1, st));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) best = std::min(best, ms);
  }
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  return 2.0 * bytes / (best * 1e-3) / 1e9;
}

// A bf16 value's bits as float (exact).
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Qwen3-0.6B's decode projections, y[M, n] = x[M, k] W[n, k]^T: 28 layers of the first four,
// then the lm_head once a step (the GEMM benchmarks' shapes and their per-step sums).
struct Projection {
  const char* name;
  int64_t n, k;
  double per_step;  // calls a decode step
};
inline constexpr Projection kQwen3Projections[] = {{"qkv", 4096, 1024, 28},
                                                   {"o_proj", 1024, 2048, 28},
                                                   {"gate_up", 6144, 1024, 28},
                                                   {"down", 1024, 3072, 28},
                                                   {"lm_head", 151936, 1024, 1}};

// A GEMM benchmark's device: its properties and a stream, after printing the device line and
// the copy ceiling (measure_copy_gbps) that its "of copy" columns divide by.
struct BenchDevice {
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
  double copy_gbps = 0.0;
};
inline BenchDevice open_bench_device() {
  BenchDevice d;
  BENCH_CUDA(cudaGetDeviceProperties(&d.prop, 0));
  std::printf("device: %s, %d SMs, L2 %.0f MB\n", d.prop.name, d.prop.multiProcessorCount,
              d.prop.l2CacheSize / 1e6);
  BENCH_CUDA(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  d.copy_gbps = measure_copy_gbps(d.stream, e0, e1);  // 1 GB device to device
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  std::printf("copy ceiling: %.0f GB/s (read + write)\n", d.copy_gbps);
  return d;
}

}  // namespace
