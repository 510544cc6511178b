// Where a short decode's time goes (diagnostics for issue 4's single-sequence target).
//
// 1. Floors of the timing method on this card, for the byte counts of short decodes: a plain
//    streaming read of N bytes (all addresses known up front) after an L2 flush, and one
//    thread's chain of dependent loads to cold pages (the price of each dependent round trip:
//    length -> block ids -> keys).
// 2. Phase stamps of the small-batch decode kernel (cuda_tuning().decode_probe): per CTA, the
//    cycles from its entry until the length arrived, its first tile landed, its warps were
//    done, its piece was stored, (the merger) every piece had arrived and was merged, and its
//    exit; printed as min / median / max over CTAs in microseconds, with the launch skew
//    (entry times) and the last exit. Non-mergers count 0 in the "merged" row.
// 3. The split (stream-mode) kernel's balance: per CTA its entry and each warp's end (when its
//    last tile was done), for uniform and ragged batches: how far the last CTA ends after the
//    median one (the tail a static split of the tiles leaves), and what the event time holds
//    beyond the CTAs' lifetimes (launch, the merge kernel).
//   gpu_decode_probe [--reps N] [--only split] [--sm-ends]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.cuh"
#include "paged_decode_case.cuh"
#include "kernels/cuda/decode/decode_params.h"
#include "kernels/cuda/tuning.h"
#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"
#include "kvattn/kernels/decode_attention.h"

namespace {

using kvattn::DType;
using kvattn::Tensor;
const kvattn::Device kGpu = kvattn::Device::cuda(0);
int g_reps = 50;
bool g_sm_ends = false;  // --sm-ends: the split kernel's CTA end times by SM

// Each CTA reads a contiguous slice of n16 16-byte words, 8 loads in flight per thread.
__global__ void stream_read(const int4* p, int64_t n16, int* sink) {
  const int64_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const int64_t lo = blockIdx.x * per;
  const int64_t hi = min(n16, lo + per);
  int acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += 8 * int64_t{blockDim.x}) {
    int4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t j = i + u * int64_t{blockDim.x};
      v[u] = j < hi ? __ldcs(p + j) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

// One thread follows `hops` pointers (each to a different 2 MB page).
__global__ void chase(const int64_t* p, int hops, int64_t* sink) {
  int64_t at = 0;
  for (int h = 0; h < hops; ++h) at = __ldcg(p + at);
  *sink = at;
}

void floors() {
  std::printf("## floors (median of %d reps)\n", g_reps);
  const double sizes_mb[] = {8.4, 33.5, 134.2};
  void* buf = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, size_t{160} << 20));
  BENCH_CUDA(cudaMemset(buf, 1, size_t{160} << 20));
  int* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&sink, 64));
  for (double mb : sizes_mb) {
    const int64_t n16 = static_cast<int64_t>(mb * 1e6 / 16);
    for (int ctas : {128, 264, 1056}) {
      for (Flush f : {Flush::kMemset, Flush::kRead, Flush::kNone}) {
        const double us = median_us(
            [&] { stream_read<<<ctas, 256>>>(static_cast<const int4*>(buf), n16, sink); }, f, g_reps);
        std::printf("{\"probe\": \"stream read\", \"MB\": %.1f, \"ctas\": %d, \"flush\": \"%s\", "
                    "\"us\": %.2f, \"TBps\": %.3f}\n",
                    mb, ctas, flush_name(f), us, n16 * 16.0 / (us * 1e-6) / 1e12);
      }
    }
  }
  // Pointer chase: hop h at h * (2 MB + 4 KB) holds the index of hop h + 1.
  const int64_t stride = ((int64_t{2} << 20) + 4096) / 8;
  const int kMaxHops = 32;
  std::vector<int64_t> host(static_cast<size_t>(stride * (kMaxHops + 1)), 0);
  for (int h = 0; h < kMaxHops; ++h) host[static_cast<size_t>(h * stride)] = (h + 1) * stride;
  int64_t* chain = nullptr;
  BENCH_CUDA(cudaMalloc(&chain, host.size() * 8));
  BENCH_CUDA(cudaMemcpy(chain, host.data(), host.size() * 8, cudaMemcpyHostToDevice));
  for (Flush f : {Flush::kMemset, Flush::kRead, Flush::kNone}) {
    for (int hops : {0, 1, 2, 4, 8, 16, 32}) {
      const double us = median_us([&] { chase<<<1, 1>>>(chain, hops, reinterpret_cast<int64_t*>(sink)); },
                                  f, g_reps);
      std::printf("{\"probe\": \"dependent loads\", \"hops\": %d, \"flush\": \"%s\", \"us\": %.2f}\n",
                  hops, flush_name(f), us);
    }
  }
  BENCH_CUDA(cudaFree(chain));
  BENCH_CUDA(cudaFree(buf));
  BENCH_CUDA(cudaFree(sink));
}

// How many thread-block clusters of each size can be resident at once for CTAs shaped like the
// small decode kernel's (8 warps with ~196 KB of shared memory, or 4 warps with ~98 KB).
__global__ void cluster_shape_probe(int* sink) {
  extern __shared__ int smem_probe[];
  if (threadIdx.x == 0 && sink == nullptr) smem_probe[0] = 0;
}

void cluster_capacity() {
  std::printf("\n## resident clusters (cudaOccupancyMaxActiveClusters)\n");
  const auto kernel = cluster_shape_probe;
  for (const auto& [threads, smem] : {std::pair<int, int>{256, 196 << 10}, {128, 98 << 10}}) {
    BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (unsigned cs : {1u, 2u, 4u, 8u, 16u}) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(cs * 64);
      cfg.blockDim = dim3(threads);
      cfg.dynamicSmemBytes = static_cast<size_t>(smem);
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cs;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int n = -1;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, kernel, &cfg);
      std::printf("{\"probe\": \"clusters\", \"threads\": %d, \"smem_kb\": %d, \"cluster\": %u, "
                  "\"resident_clusters\": %d, \"ctas\": %d, \"err\": \"%s\"}\n",
                  threads, smem >> 10, cs, n, n * static_cast<int>(cs), cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
  }
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

// The decode's median time after flush f (unprobed), then one probed launch whose stamps land
// in st (via the device buffer dev, zeroed first): {median us, probed launch's us}.
std::pair<double, double> timed_and_probed(const kvattn::DecodeArgs& a, Flush f,
                                           unsigned long long* dev,
                                           std::vector<unsigned long long>& st) {
  auto& tuning = kvattn::cuda::cuda_tuning();
  const double plain = median_us([&] { kvattn::decode_attention(a); }, f, g_reps);
  BENCH_CUDA(cudaMemset(dev, 0, st.size() * 8));
  tuning.decode_probe = dev;
  const double probed = median_us([&] { kvattn::decode_attention(a); }, f, 1, 0);
  tuning.decode_probe = nullptr;
  BENCH_CUDA(cudaMemcpy(st.data(), dev, st.size() * 8, cudaMemcpyDeviceToHost));
  return {plain, probed};
}

// One decode of B sequences of `len` keys (32/8 heads, D 128, page 16, shuffled blocks) with
// the phase probe on, after each flush; prints the phase table.
void phases(int64_t B, int64_t len, int max_chunks = 0) {
  const int64_t hq = 32, hkv = 8, d = PagedDecodeCase::kHeadDim, bs = 16;
  std::mt19937_64 rng(7);
  const PagedDecodeCase pc =
      make_paged_decode_case(std::vector<int64_t>(static_cast<size_t>(B), len), hq, hkv, bs, rng);
  kvattn::DecodeArgs a = pc.args();
  const size_t kMaxCtas = 1 << 16;
  std::vector<unsigned long long> st(kMaxCtas * kvattn::cuda::kDecodeProbeSlots);
  unsigned long long* dev = nullptr;
  BENCH_CUDA(cudaMalloc(&dev, st.size() * 8));
  auto& tuning = kvattn::cuda::cuda_tuning();
  tuning.decode_small_max_chunks = max_chunks;
  a.plan = kvattn::plan_decode(B, hq, hkv, d, 1, len, kGpu);
  Tensor ws = Tensor::empty({std::max<int64_t>(a.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  a.workspace = ws;
  for (Flush f : {Flush::kMemset, Flush::kRead, Flush::kNone}) {
    const auto [plain, probed] = timed_and_probed(a, f, dev, st);
    constexpr int S = kvattn::cuda::kDecodeProbeSlots;
    size_t n = 0;
    while (n < kMaxCtas && st[n * S + 0] != 0 && st[n * S + 11] != kvattn::cuda::kDecodeProbeSplit) ++n;
    if (n == 0) {
      std::printf("%lldx%lld: no stamps (the small kernel did not run: splits %d)\n",
                  static_cast<long long>(B), static_cast<long long>(len), a.plan.num_splits);
      break;
    }
    // Cycles -> us from the CTAs' own globaltimer span over clock span.
    double ns_per_cycle = 0;
    unsigned long long t0 = ~0ull, tend = 0;
    for (size_t i = 0; i < n; ++i) {
      ns_per_cycle += static_cast<double>(st[i * S + 1] - st[i * S + 0]) / std::max(1ull, st[i * S + 2]);
      t0 = std::min(t0, st[i * S + 0]);
      tend = std::max(tend, st[i * S + 1]);
    }
    ns_per_cycle /= n;
    std::printf("\n## %lldx%lld (max chunks %d), %s: %zu CTAs, event time %.2f us (unprobed median %.2f), "
                "first entry -> last exit %.2f us, %.3f ns/cycle\n",
                static_cast<long long>(B), static_cast<long long>(len), max_chunks, flush_name(f), n, probed,
                plain, (tend - t0) * 1e-3, ns_per_cycle);
    const char* names[] = {"entry skew (from first entry)", "exit (from first entry)",
                           "length arrived", "first tile landed (warp 0)",
                           "warp 0 done", "all warps done", "piece stored",
                           "merged (merger only)", "exit (merger)", "exit (others)"};
    std::vector<std::vector<double>> col(10);
    for (size_t i = 0; i < n; ++i) {
      const unsigned long long* w = &st[i * S];
      col[0].push_back((w[0] - t0) * 1e-3);
      col[1].push_back((w[1] - t0) * 1e-3);
      if (w[9] == 2) continue;  // a chunk unused at this length (decode_small_min_tiles)
      for (int k = 3; k <= 8; ++k) col[static_cast<size_t>(k - 1)].push_back(w[k] * ns_per_cycle * 1e-3);
      col[w[9] == 1 ? 8 : 9].push_back(w[2] * ns_per_cycle * 1e-3);
    }
    std::printf("%-34s %8s %8s %8s %8s   (us; phases from the CTA's own entry)\n", "phase", "min",
                "median", "p90", "max");
    for (size_t k = 0; k < col.size(); ++k) {
      std::printf("%-34s %8.2f %8.2f %8.2f %8.2f  n=%zu\n", names[k], pct(col[k], 0), pct(col[k], 0.5),
                  pct(col[k], 0.9), pct(col[k], 1.0), col[k].size());
    }
  }
  tuning.decode_small_max_chunks = 0;
  BENCH_CUDA(cudaFree(dev));
}

// One decode of `lens` (hq / hkv heads of d dims, page 16) in stream mode with the probe on,
// `runs` times after a read flush (and once unflushed); prints, per run, the CTAs' end times
// (the latest of their warps', from the first entry) as min / median / p90 / max, the tail
// (max - median), the spread of warps' ends inside a CTA, and the event time against the
// first entry -> last end span.
void split_balance(const char* name, const std::vector<int64_t>& lens, int64_t hq, int64_t hkv,
                   int64_t d, int waves = 1, bool dynamic = false, int runs = 3) {
  auto& tuning = kvattn::cuda::cuda_tuning();
  const kvattn::cuda::CudaTuning saved = tuning;
  tuning.decode_stream_waves = waves;
  tuning.decode_dynamic_split = dynamic ? 1 : 0;
  std::mt19937_64 rng(11);
  const PagedDecodeCase pc = make_paged_decode_case(lens, hq, hkv, 16, rng, d);
  kvattn::DecodeArgs a = pc.args();
  const auto B = static_cast<int64_t>(lens.size());
  a.plan = kvattn::plan_decode(B, hq, hkv, d, 1, *std::max_element(lens.begin(), lens.end()), kGpu);
  Tensor ws = Tensor::empty({std::max<int64_t>(a.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  a.workspace = ws;
  constexpr int S = kvattn::cuda::kDecodeProbeSlots;
  const size_t kMaxCtas = 1 << 14;
  std::vector<unsigned long long> st(kMaxCtas * S);
  unsigned long long* dev = nullptr;
  BENCH_CUDA(cudaMalloc(&dev, st.size() * 8));
  std::printf("\n## split balance: %s (%lld sequences, %.1f MB of K/V, splits %d, %s)\n", name,
              static_cast<long long>(B), pc.kv_bytes / 1e6, a.plan.num_splits,
              dynamic ? "dynamic split" : waves > 1 ? "waves" : "static split");
  std::printf("%-10s %7s %7s %6s | %-38s | %6s %6s | %8s %8s\n", "flush", "event", "plain",
              "ctas", "CTA end from first entry: min/med/p90/max", "tail", "warps", "span",
              "TB/s");
  for (int run = 0; run <= runs; ++run) {
    const Flush f = run < runs ? Flush::kRead : Flush::kNone;
    const auto [plain, probed] = timed_and_probed(a, f, dev, st);
    // Per CTA of the split kernel with a range: its SM and its warps' first and last ends.
    struct CtaEnds {
      unsigned long long sm, lo, hi;
    };
    std::vector<CtaEnds> ctas;
    unsigned long long t0 = ~0ull, tend = 0;
    for (size_t i = 0; i < kMaxCtas; ++i) {
      const unsigned long long* w = &st[i * S];
      if (w[11] != kvattn::cuda::kDecodeProbeSplit) continue;
      t0 = std::min(t0, w[0]);
      CtaEnds c{w[10], ~0ull, 0};
      for (int k = 2; k < 2 + kvattn::cuda::kDecodeMaxWarps; ++k) {
        if (w[k] == 0) continue;  // a warp without a unit
        c.lo = std::min(c.lo, w[k]);
        c.hi = std::max(c.hi, w[k]);
      }
      if (c.hi == 0) continue;  // no range
      ctas.push_back(c);
      tend = std::max(tend, c.hi);
    }
    if (t0 == ~0ull) {
      std::printf("no split-kernel stamps (another kernel ran)\n");
      break;
    }
    std::vector<double> ends, spreads;
    for (const CtaEnds& c : ctas) {
      ends.push_back((c.hi - t0) * 1e-3);
      spreads.push_back((c.hi - c.lo) * 1e-3);
    }
    if (g_sm_ends) {  // CTA end by SM (one CTA an SM at d128): is a slow SM slow every run?
      std::sort(ctas.begin(), ctas.end(), [](const CtaEnds& x, const CtaEnds& y) { return x.sm < y.sm; });
      std::printf("sm ends (%s):", flush_name(f));
      for (const CtaEnds& c : ctas) std::printf(" %llu:%.0f", c.sm, (c.hi - t0) * 1e-3);
      std::printf("\n");
    }
    const double span = (tend - t0) * 1e-3;
    std::printf("%-10s %7.2f %7.2f %6zu | %8.2f %8.2f %8.2f %8.2f       | %6.2f %6.2f | %8.2f %8.3f\n",
                flush_name(f), probed, plain, ends.size(), pct(ends, 0), pct(ends, 0.5),
                pct(ends, 0.9), pct(ends, 1.0), pct(ends, 1.0) - pct(ends, 0.5), pct(spreads, 0.5),
                span, pc.kv_bytes / (plain * 1e-6) / 1e12);
  }
  BENCH_CUDA(cudaFree(dev));
  tuning = saved;
}

}  // namespace

int main(int argc, char** argv) {
  bool only_split = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only_split = !std::strcmp(argv[++i], "split");
    if (!std::strcmp(argv[i], "--sm-ends")) g_sm_ends = true;
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to probe\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  int khz = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  std::printf("# %s, %d SMs, L2 %d MB, SM clock %d MHz\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, khz / 1000);
  init_l2_flush();
  // The split kernel's balance: the uniform acceptance shapes of issue 16 and the engine's
  // ragged batches (lengths drawn from [100, 2048], as nano-vllm's workload decodes).
  auto ragged = [](int n) {
    std::mt19937_64 r(5);
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = 100 + static_cast<int64_t>(r() % 1949);
    return v;
  };
  split_balance("64x4096 32/8 d128", std::vector<int64_t>(64, 4096), 32, 8, 128);
  if (g_sm_ends) {  // the same shape with two CTAs of 4 KV heads an SM
    auto& t = kvattn::cuda::cuda_tuning();
    const kvattn::cuda::CudaTuning saved = t;
    t.decode_heads_per_cta = 4;
    t.decode_stages = 3;
    split_balance("64x4096 32/8 d128, 4 heads a CTA, 3 stages", std::vector<int64_t>(64, 4096),
                  32, 8, 128);
    t = saved;
    return 0;
  }
  split_balance("256x1024 16/8 d128", std::vector<int64_t>(256, 1024), 16, 8, 128);
  split_balance("96x4096 9/3 d64", std::vector<int64_t>(96, 4096), 9, 3, 64);
  split_balance("148 ragged [100,2048] 16/8 d128", ragged(148), 16, 8, 128);
  split_balance("64 ragged [100,2048] 16/8 d128", ragged(64), 16, 8, 128);
  // The dynamic split (decode_dynamic_split): CTAs that finish first claim more of the last
  // quarter's ranges. Only in a build that compiles it in (KVATTN_DECODE_DYNAMIC_SPLIT_BUILD).
  if (kvattn::cuda::kDecodeDynamicSplitBuilt) {
    split_balance("64x4096 32/8 d128", std::vector<int64_t>(64, 4096), 32, 8, 128, 1, true);
    split_balance("256x1024 16/8 d128", std::vector<int64_t>(256, 1024), 16, 8, 128, 1, true);
    split_balance("96x4096 9/3 d64", std::vector<int64_t>(96, 4096), 9, 3, 64, 1, true);
    split_balance("148 ragged [100,2048] 16/8 d128", ragged(148), 16, 8, 128, 1, true);
    split_balance("64 ragged [100,2048] 16/8 d128", ragged(64), 16, 8, 128, 1, true);
  }
  if (only_split) return 0;
  floors();
  cluster_capacity();
  phases(1, 8192);
  phases(1, 8192, 8);
  phases(1, 2048);
  phases(1, 32768);
  phases(4, 8192);
  return 0;
}
