// CUDA prefill_attention benchmark: the prefill shapes of TARGETS.md (bf16, head_dim 128 and
// 64, causal), packed and paged (prefix hit at page 16 and 256), timed two ways (TARGETS.md):
// "flushed", CUDA events around each launch with the L2 flushed before it (as triton's do_bench
// does for the peers), median of many repetitions after warm-up; and "graph", 20 back-to-back
// calls captured in one CUDA graph, replayed, time / 20 (median of replays). The library's
// default (the Hopper kernel where it applies, persistent grid) is timed beside the same kernel
// with one CTA per tile ("grid"), an alternative tile, and the sm_80 kernel
// (CudaTuning::prefill_sm90 = 0), each checked against the default; the bf16 GEMM ceiling (cuBLASLt
// 8192^3) is measured in the same run. One JSON line per (shape, variant) on stdout, then a
// short table. FLOPs = 4 * visible (q, k) pairs * num_heads * head_dim (exact count).
// Feature shapes (issue 18: sliding window, softcap, ALiBi) time the library's default (the
// Hopper kernel's kMods form on an H200) beside "plain" (the same shape without the features:
// the plain Hopper kernel, its own FLOPs) and "sm80" (the sm_80 ext kernel, checked against the
// default).
//
// head_dim 256 runs on the Hopper kernel (128 x 80 tiles) and on the sm_80 ext kernel ("sm80");
// no alternative tile there (128 x 80 spills).
//
//   gpu_prefill_bench [--reps N] [--quick] [--features | --d256]
//     default: the plain shapes; --features: the feature shapes (head_dim 64/128/256);
//     --d256: the plain head_dim 256 shapes
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/hopper/prefill_sm90_launch.cuh"
#include "kernels/cuda/prefill_launch.h"
#include "kernels/cuda/tuning.h"
#include "kvattn/kernels/device_faults.h"
#include "kvattn/kernels/prefill_attention.h"
#include "bench_util.cuh"

namespace {

using namespace kvattn;

__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = __float2bfloat16(static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

struct DeviceBuffer {
  void* p = nullptr;
  int64_t bytes = 0;
  explicit DeviceBuffer(int64_t n) : bytes(n) { BENCH_CUDA(cudaMalloc(&p, std::max<int64_t>(n, 1))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

void fill_random(DeviceBuffer& b, uint64_t seed) {
  fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b.p), b.bytes / 2, seed);
  BENCH_CUDA(cudaGetLastError());
}

struct Shape {
  std::string name;
  int64_t batch, lq, lk, hq, hkv, d;
  int64_t page;  // 0: packed keys
  // Issue 18's features (causal stays on): window_size left (-1: none), softcap (0: off),
  // ALiBi slopes [hq] (2^(-8 (h + 1) / hq)).
  int64_t window_left = -1;
  float softcap = 0.0f;
  bool alibi = false;
  bool features() const { return window_left >= 0 || softcap > 0.0f || alibi; }
};

// Causal, bottom-right aligned, with the left window when given.
double visible_pairs(const Shape& s, bool with_window = true) {
  const int64_t wl = with_window ? s.window_left : -1;
  double pairs = 0;
  for (int64_t i = 0; i < s.lq; ++i) {
    const int64_t diag = i + s.lk - s.lq;
    const int64_t hi = std::min(s.lk, diag + 1);
    const int64_t lo = wl >= 0 ? std::max<int64_t>(0, diag - wl) : 0;
    pairs += static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  return s.batch * pairs;
}

// The inputs of one shape on the device, and the PrefillArgs over them.
struct Problem {
  Shape s;
  std::unique_ptr<DeviceBuffer> q, k, v, out, cuq, cuk, table, slopes;
  PrefillArgs args;
  PrefillArgs plain_args;  // the same call without the features
  AttentionShape shape;

  explicit Problem(const Shape& sh, uint64_t seed) : s(sh) {
    const int64_t tq = s.batch * s.lq, tk = s.batch * s.lk;
    q = std::make_unique<DeviceBuffer>(tq * s.hq * s.d * 2);
    out = std::make_unique<DeviceBuffer>(tq * s.hq * s.d * 2);
    const int64_t kv_rows = s.page ? (tk + s.page - 1) / s.page * s.page : tk;
    k = std::make_unique<DeviceBuffer>(kv_rows * s.hkv * s.d * 2);
    v = std::make_unique<DeviceBuffer>(kv_rows * s.hkv * s.d * 2);
    fill_random(*q, seed);
    fill_random(*k, seed + 1);
    fill_random(*v, seed + 2);
    std::vector<int32_t> cq(s.batch + 1), ck(s.batch + 1);
    for (int64_t b = 0; b <= s.batch; ++b) {
      cq[b] = static_cast<int32_t>(b * s.lq);
      ck[b] = static_cast<int32_t>(b * s.lk);
    }
    cuq = std::make_unique<DeviceBuffer>(4 * (s.batch + 1));
    cuk = std::make_unique<DeviceBuffer>(4 * (s.batch + 1));
    BENCH_CUDA(cudaMemcpy(cuq->p, cq.data(), cuq->bytes, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(cuk->p, ck.data(), cuk->bytes, cudaMemcpyHostToDevice));

    const Device dev = Device::cuda(0);
    args.q = TensorView(q->p, DType::kBF16, dev, {tq, s.hq, s.d});
    args.out = TensorView(out->p, DType::kBF16, dev, {tq, s.hq, s.d});
    args.cu_seqlens_q = TensorView(cuq->p, DType::kI32, dev, {s.batch + 1});
    args.cu_seqlens_k = TensorView(cuk->p, DType::kI32, dev, {s.batch + 1});
    args.max_seqlen_q = s.lq;
    args.max_seqlen_k = s.lk;
    args.causal = true;
    shape.num_seqs = s.batch;
    shape.num_heads = s.hq;
    shape.num_kv_heads = s.hkv;
    shape.head_dim = s.d;
    shape.total_q = tq;
    shape.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    if (s.page == 0) {
      args.k = TensorView(k->p, DType::kBF16, dev, {tk, s.hkv, s.d});
      args.v = TensorView(v->p, DType::kBF16, dev, {tk, s.hkv, s.d});
    } else {
      // A shuffled block table: every sequence's pages are scattered over the pool.
      const int64_t blocks = kv_rows / s.page, per_seq = (s.lk + s.page - 1) / s.page;
      std::vector<int32_t> ids(blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
      std::vector<int32_t> t(s.batch * per_seq);
      for (int64_t i = 0; i < s.batch * per_seq; ++i) t[i] = ids[i];
      table = std::make_unique<DeviceBuffer>(4 * t.size());
      BENCH_CUDA(cudaMemcpy(table->p, t.data(), table->bytes, cudaMemcpyHostToDevice));
      args.k = TensorView(k->p, DType::kBF16, dev, {blocks, s.page, s.hkv, s.d});
      args.v = TensorView(v->p, DType::kBF16, dev, {blocks, s.page, s.hkv, s.d});
      args.block_table = TensorView(table->p, DType::kI32, dev, {s.batch, per_seq});
      shape.paged = true;
      shape.num_blocks = blocks;
      shape.block_size = s.page;
      shape.max_blocks_per_seq = per_seq;
    }
    plain_args = args;
    args.window_left = s.window_left;
    args.softcap = s.softcap;
    if (s.alibi) {
      std::vector<float> sl(s.hq);
      for (int64_t h = 0; h < s.hq; ++h) sl[h] = std::exp2(-8.0f * (h + 1) / s.hq);
      slopes = std::make_unique<DeviceBuffer>(4 * s.hq);
      BENCH_CUDA(cudaMemcpy(slopes->p, sl.data(), slopes->bytes, cudaMemcpyHostToDevice));
      args.alibi_slopes = TensorView(slopes->p, DType::kF32, dev, {s.hq});
    }
  }
};

// Median time of `run` in ms: warm-up, then `reps` launches each between events, with a
// 256 MB memset before each (outside the events) so that no launch starts from a warm L2.
double time_ms(const std::function<void()>& run, int reps, DeviceBuffer& flush) {
  for (int i = 0; i < 3; ++i) run();
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaMemsetAsync(flush.p, i & 0xFF, flush.bytes));
    BENCH_CUDA(cudaEventRecord(a));
    run();
    BENCH_CUDA(cudaEventRecord(b));
    BENCH_CUDA(cudaEventSynchronize(b));
    BENCH_CUDA(cudaEventElapsedTime(&ms[i], a, b));
  }
  BENCH_CUDA(cudaEventDestroy(a));
  BENCH_CUDA(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

std::vector<float> download_out(const Problem& p) {
  const int64_t n = p.out->bytes / 2;
  std::vector<uint16_t> bits(n);
  BENCH_CUDA(cudaMemcpy(bits.data(), p.out->p, p.out->bytes, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = bf16_to_float(bf16_t{bits[i]});
  return f;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    if (std::isnan(a[i])) return NAN;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The stream the benchmark's calls go to (nullptr: the legacy default stream; the graph timing
// captures on its own stream).
cudaStream_t g_stream = nullptr;

// Median time of one call in ms over `reps` replays of a CUDA graph of 20 back-to-back calls.
double graph_ms(const std::function<void()>& run, int reps) {
  constexpr int kCalls = 20;
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  g_stream = stream;
  for (int i = 0; i < kCalls; ++i) run();
  g_stream = nullptr;
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) BENCH_CUDA(cudaGraphLaunch(exec, stream));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaEventRecord(a, stream));
    BENCH_CUDA(cudaGraphLaunch(exec, stream));
    BENCH_CUDA(cudaEventRecord(b, stream));
    BENCH_CUDA(cudaEventSynchronize(b));
    BENCH_CUDA(cudaEventElapsedTime(&ms[i], a, b));
  }
  BENCH_CUDA(cudaEventDestroy(a));
  BENCH_CUDA(cudaEventDestroy(b));
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  BENCH_CUDA(cudaStreamDestroy(stream));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2] / kCalls;
}

// The bf16 GEMM ceiling of this run in TFLOP/s: cuBLAS C = A B (8192^3, bf16 in and out, f32
// accumulation) on random data, median of 20 after warm-up.
double gemm_ceiling_tflops() {
  constexpr int n = 8192;
  DeviceBuffer a(int64_t{n} * n * 2), b(int64_t{n} * n * 2), c(int64_t{n} * n * 2);
  fill_random(a, 11);
  fill_random(b, 12);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return NAN;
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&] {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p,
                        CUDA_R_16BF, n, &zero, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 3; ++i) {
    if (gemm() != CUBLAS_STATUS_SUCCESS) return NAN;
  }
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms(20);
  for (float& m : ms) {
    BENCH_CUDA(cudaEventRecord(e0));
    gemm();
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    BENCH_CUDA(cudaEventElapsedTime(&m, e0, e1));
  }
  cublasDestroy(h);
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * n * static_cast<double>(n) / (ms[10] * 1e-3) / 1e12;
}

// The default tiles with O written straight from the accumulators (4-byte stores; the default
// stages it in shared memory since session 15: Tile::kSmemEpilogue). head_dim 256 has no
// staged form (no room), so its "direct" is the default.
template <int D>
using DirectEpilogueTile = cuda::Sm90PrefillTileConfig<
    D, cuda::Sm90PrefillTile<D>::kConsumerWarpgroups, cuda::Sm90PrefillTile<D>::kStages,
    cuda::Sm90PrefillTile<D>::kBlockN, true, false, false,
    cuda::Sm90PrefillTile<D>::kRescaleBeforeTurn, cuda::Sm90PrefillTile<D>::kUniformWarpgroup,
    cuda::Sm90PrefillTile<D>::kMaxBeforeWait, cuda::Sm90PrefillTile<D>::kLeanLoop>;

// Runs a bench-only tile configuration (causal bf16, packed or paged) on the problem's
// tensors; Tile64 / Tile128 / Tile256 by head_dim.
template <class Tile64, class Tile128, class Tile256>
void run_tile_for(const Problem& p, cudaStream_t stream) {
  const cuda::PrefillParams params = cuda::make_prefill_params(p.args, p.shape);
  auto go = [&](auto tile) {
    using Tile = decltype(tile);
    if (p.shape.paged) {
      cuda::launch_prefill_sm90_tile<__nv_bfloat16, Tile, true, true>(params, stream);
    } else {
      cuda::launch_prefill_sm90_tile<__nv_bfloat16, Tile, true, false>(params, stream);
    }
  };
  if (p.s.d == 64) {
    go(Tile64{});
  } else if (p.s.d == 128) {
    go(Tile128{});
  } else {
    go(Tile256{});
  }
}

void run_direct_epilogue_tile(const Problem& p, cudaStream_t stream) {
  run_tile_for<DirectEpilogueTile<64>, DirectEpilogueTile<128>, cuda::Sm90PrefillTile<256>>(p,
                                                                                           stream);
}

// The head_dim's library tile (its plain kernels' form: no tile handover built in) with the
// three key-loop flags given; the bench's rows below flip one of them, or return to session
// 26's tile.
template <class Tile, bool kUniformWarpgroup, bool kMaxBeforeWait, bool kLeanLoop>
using LibraryTileWith = cuda::Sm90PrefillTileConfig<
    Tile::kHeadDim, Tile::kConsumerWarpgroups, Tile::kStages, Tile::kBlockN, true,
    Tile::kSmemEpilogue, false, Tile::kRescaleBeforeTurn, kUniformWarpgroup, kMaxBeforeWait,
    kLeanLoop>;
// Tile::kMaxBeforeWait flipped (on at head_dim 128 only; the plain kernels: the features'
// kMods kernels keep the old order either way).
template <class Tile>
using MaxWaitFlippedTile = LibraryTileWith<Tile, Tile::kUniformWarpgroup, !Tile::kMaxBeforeWait,
                                           Tile::kLeanLoop>;
// Session 26's library tile: no lean key loop, the uniform warpgroup index at head_dim 256 only
// (the comparison for session 27's defaults).
template <class Tile>
using Session26Tile =
    LibraryTileWith<Tile, Tile::kHeadDim == 256, Tile::kMaxBeforeWait, false>;
// Tile::kLeanLoop flipped.
template <class Tile>
using LeanLoopFlippedTile = LibraryTileWith<Tile, Tile::kUniformWarpgroup, Tile::kMaxBeforeWait,
                                            !Tile::kLeanLoop>;

// Runs Flipped<the head_dim's library tile>, causal bf16, packed or paged, choosing the
// handover form as the library does.
template <template <class> class Flipped>
void run_flipped_tile(const Problem& p, cudaStream_t stream) {
  const cuda::PrefillParams params = cuda::make_prefill_params(p.args, p.shape);
  const int mode = cuda::cuda_tuning().prefill_sm90_handover;
  auto go = [&](auto tile) {
    using Tile = Flipped<decltype(tile)>;
    if (p.shape.paged) {
      cuda::launch_prefill_sm90_tile_choosing_handover<__nv_bfloat16, Tile, true, true, false>(
          params, stream, mode);
    } else {
      cuda::launch_prefill_sm90_tile_choosing_handover<__nv_bfloat16, Tile, true, false, false>(
          params, stream, mode);
    }
  };
  if (p.s.d == 64) {
    go(cuda::Sm90PrefillTile<64>{});
  } else if (p.s.d == 128) {
    go(cuda::Sm90PrefillTile<128>{});
  } else {
    go(cuda::Sm90PrefillTile<256>{});
  }
}

struct Row {
  std::string shape, variant;
  double ms, tflops, graph_ms, graph_tflops, err;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  bool quick = false;
  bool features_only = false;
  bool d256_only = false;
  const char* only = nullptr;  // --only SUBSTR: the shapes whose name contains SUBSTR
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--features")) features_only = true;
    if (!std::strcmp(argv[i], "--d256")) d256_only = true;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (!cuda_available()) {
    std::printf("{\"bench\":\"prefill\",\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"bench\":\"prefill\",\"device\":\"%s\",\"sms\":%d,\"reps\":%d}\n", prop.name,
              prop.multiProcessorCount, reps);

  std::vector<Shape> shapes = {
      {"8x2048 32/8", 8, 2048, 2048, 32, 8, 128, 0},
      {"1x16384 32/8", 1, 16384, 16384, 32, 8, 128, 0},
      {"16x1024 16/8", 16, 1024, 1024, 16, 8, 128, 0},
      {"prefix 8x(512/4096) 32/8 packed", 8, 512, 4096, 32, 8, 128, 0},
      {"prefix 8x(512/4096) 32/8 page16", 8, 512, 4096, 32, 8, 128, 16},
      {"prefix 8x(512/4096) 32/8 page256", 8, 512, 4096, 32, 8, 128, 256},
      {"4x4096 9/3 d64", 4, 4096, 4096, 9, 3, 64, 0},
      {"8x2048 32/8 d64", 8, 2048, 2048, 32, 8, 64, 0},
      // head_dim 256 (Gemma 2/3: 16 query / 8 KV heads at 9B)
      {"8x2048 16/8 d256", 8, 2048, 2048, 16, 8, 256, 0},
      {"1x16384 16/8 d256", 1, 16384, 16384, 16, 8, 256, 0},
      {"prefix 8x(512/4096) 16/8 d256 page16", 8, 512, 4096, 16, 8, 256, 16},
      {"prefix 8x(512/4096) 16/8 d256 page256", 8, 512, 4096, 16, 8, 256, 256},
  };
  // Issue 18's features on the shapes above (bf16, causal).
  const std::vector<Shape> feature_shapes = {
      {"8x2048 32/8 softcap50", 8, 2048, 2048, 32, 8, 128, 0, -1, 50.0f, false},
      {"8x2048 32/8 alibi", 8, 2048, 2048, 32, 8, 128, 0, -1, 0.0f, true},
      {"8x2048 32/8 win1024", 8, 2048, 2048, 32, 8, 128, 0, 1023, 0.0f, false},
      {"1x16384 32/8 win4096", 1, 16384, 16384, 32, 8, 128, 0, 4095, 0.0f, false},
      {"1x16384 32/8 win4096 softcap alibi", 1, 16384, 16384, 32, 8, 128, 0, 4095, 50.0f, true},
      {"prefix 8x(512/4096) page16 win1024", 8, 512, 4096, 32, 8, 128, 16, 1023, 0.0f, false},
      {"prefix 8x(512/4096) page256 softcap", 8, 512, 4096, 32, 8, 128, 256, -1, 30.0f, false},
      {"4x4096 9/3 d64 win1024 alibi", 4, 4096, 4096, 9, 3, 64, 0, 1023, 0.0f, true},
      {"8x2048 32/8 d64 softcap50", 8, 2048, 2048, 32, 8, 64, 0, -1, 50.0f, false},
      // Gemma 2: softcap 50 everywhere, a 4096-key window on the local layers
      {"8x2048 16/8 d256 softcap50", 8, 2048, 2048, 16, 8, 256, 0, -1, 50.0f, false},
      {"1x16384 16/8 d256 win4096 softcap50", 1, 16384, 16384, 16, 8, 256, 0, 4095, 50.0f, false},
      {"prefix 8x(512/4096) 16/8 d256 page16 win1024", 8, 512, 4096, 16, 8, 256, 16, 1023, 0.0f,
       false},
  };
  // Default: the shapes above without head_dim 256; --features: the feature shapes; --d256:
  // the plain head_dim 256 shapes.
  shapes.erase(std::remove_if(shapes.begin(), shapes.end(),
                              [&](const Shape& s) { return (s.d == 256) != d256_only; }),
               shapes.end());
  if (features_only) shapes = feature_shapes;
  if (only != nullptr) {
    std::erase_if(shapes, [&](const Shape& s) { return s.name.find(only) == std::string::npos; });
  }
  if (quick) shapes.resize(std::min<size_t>(shapes.size(), 1));
  const double ceiling = gemm_ceiling_tflops();
  std::printf("{\"bench\":\"prefill\",\"ceiling\":\"cublas bf16 gemm 8192^3\",\"tflops\":%.1f}\n",
              ceiling);
  DeviceBuffer flush(256ll << 20);
  std::vector<Row> rows;
  uint64_t seed = 1234;
  for (const Shape& s : shapes) {
    Problem p(s, seed += 17);
    const double flops = 4.0 * visible_pairs(s) * s.hq * s.d;
    struct Variant {
      const char* name;
      std::function<void()> run;
      double flops;          // 0: the shape's
      bool compare = true;  // checked against the default (false: another problem)
    };
    auto call = [&] {
      PrefillArgs a = p.args;
      a.stream = Stream{g_stream};
      prefill_attention(a);
    };
    // The default call with one tuning switch set for its duration.
    auto with = [&](int cuda::CudaTuning::*field, int value) {
      return [&call, field, value] {
        const int saved = std::exchange(cuda::cuda_tuning().*field, value);
        call();
        cuda::cuda_tuning().*field = saved;
      };
    };
    std::vector<Variant> variants = {
        {"default", [&] { call(); }, 0.0},
        // the dynamic tile schedule never / also with the handover taken for it
        // (CudaTuning::prefill_sm90_dynamic 0 / 2; the default, 1: where the handover is taken)
        {"static", with(&cuda::CudaTuning::prefill_sm90_dynamic, 0), 0.0},
        {"dynamic2", with(&cuda::CudaTuning::prefill_sm90_dynamic, 2), 0.0},
        {"grid", with(&cuda::CudaTuning::prefill_sm90_persistent, 0), 0.0},
        // O stored from the accumulators (the default stages it in shared memory)
        {"direct_epi", [&] { run_direct_epilogue_tile(p, g_stream); }, 0.0},
        // the producer decodes the tiles and hands them over (Tile::kProducerDecode) never /
        // always (CudaTuning::prefill_sm90_handover 0 / 1; the default, 2: where key loops are
        // short)
        {"nohandover", with(&cuda::CudaTuning::prefill_sm90_handover, 0), 0.0},
        {"handover", with(&cuda::CudaTuning::prefill_sm90_handover, 1), 0.0},
        // consumers decode tiles in 64-bit arithmetic (the default: 32-bit where it fits)
        {"wide", with(&cuda::CudaTuning::prefill_sm90_narrow_decode, 0), 0.0},
        // GEMM turns restarted per tile (the default runs them on)
        {"noturns", with(&cuda::CudaTuning::prefill_sm90_turns, 0), 0.0},
        // one tile-schedule section (the order before L2 sections)
        {"l2off", with(&cuda::CudaTuning::prefill_sm90_l2_mb, 0), 0.0},
        {"sm80", with(&cuda::CudaTuning::prefill_sm90, 0), 0.0},
    };
    auto drop = [&](std::initializer_list<const char*> names) {
      for (const char* name : names) {
        std::erase_if(variants, [&](const Variant& v) { return std::strcmp(v.name, name) == 0; });
      }
    };
    if (s.features()) {  // default (kMods), the plain kernel on the same shape, the ext kernel
      drop({"grid", "direct_epi", "nohandover", "handover"});
      // the kMods kernels' tile handover where key loops are short / always
      // (CudaTuning::prefill_sm90_mods_handover 2 / 1; the default, 3: mode 2 at head_dim 128)
      variants.insert(variants.begin() + 1,
                      Variant{"mods_handover",
                              with(&cuda::CudaTuning::prefill_sm90_mods_handover, 2), 0.0});
      variants.insert(variants.begin() + 2,
                      Variant{"mods_handover1",
                              with(&cuda::CudaTuning::prefill_sm90_mods_handover, 1), 0.0});
      variants.insert(variants.begin() + 1,
                      Variant{"plain",
                              [&] {
                                PrefillArgs a = p.plain_args;
                                a.stream = Stream{g_stream};
                                prefill_attention(a);
                              },
                              4.0 * visible_pairs(s, false) * s.hq * s.d, false});
    } else if (s.d == 256) {  // no staged-epilogue tile at head_dim 256
      drop({"direct_epi"});
    }
    if (!s.features()) {  // the row max before the P V wait, the other way round
      variants.insert(variants.begin() + 1,
                      Variant{"maxwait",
                              [&] { run_flipped_tile<MaxWaitFlippedTile>(p, g_stream); }, 0.0});
      variants.insert(variants.begin() + 1,
                      Variant{"s26", [&] { run_flipped_tile<Session26Tile>(p, g_stream); },
                              0.0});
      variants.insert(variants.begin() + 1,
                      Variant{"leanloop",
                              [&] { run_flipped_tile<LeanLoopFlippedTile>(p, g_stream); }, 0.0});
    }
    if (s.page != 0 && s.page < 128) {  // paged pieces issued by one producer warp
      variants.insert(variants.begin() + 1,
                      Variant{"pwarps1",
                              with(&cuda::CudaTuning::prefill_sm90_producer_warps, 1), 0.0});
    }
    if (!s.features() && s.page != 0 && s.d != 256) {  // the experimental cp.async gather
      variants.insert(variants.begin() + 1,
                      Variant{"gather", with(&cuda::CudaTuning::prefill_sm90_paged_gather, 1), 0.0});
    }
    std::vector<float> ref;
    for (const Variant& var : variants) {
      BENCH_CUDA(cudaMemset(p.out->p, 0xFF, p.out->bytes));
      var.run();
      BENCH_CUDA(cudaDeviceSynchronize());
      const uint32_t faults = read_device_faults(Device::cuda(0));
      std::vector<float> got = download_out(p);
      double err = 0.0;
      if (!var.compare) {
        err = NAN;  // another problem: not compared
      } else if (ref.empty()) {
        ref = std::move(got);
        for (float x : ref) {
          if (!std::isfinite(x)) {
            err = NAN;
            break;
          }
        }
      } else {
        err = rel_l2(got, ref);
      }
      const double vflops = var.flops > 0.0 ? var.flops : flops;
      const double ms = time_ms(var.run, reps, flush);
      const double tflops = vflops / (ms * 1e-3) / 1e12;
      const double gms = graph_ms(var.run, std::max(5, reps / 5));
      const double gtflops = vflops / (gms * 1e-3) / 1e12;
      std::printf(
          "{\"bench\":\"prefill\",\"shape\":\"%s\",\"variant\":\"%s\",\"batch\":%lld,\"lq\":%lld,"
          "\"lk\":%lld,\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"page\":%lld,\"flops\":%.6e,"
          "\"ms\":%.5f,\"tflops\":%.2f,\"graph_ms\":%.5f,\"graph_tflops\":%.2f,"
          "\"rel_l2_vs_default\":%.3e,\"faults\":%u}\n",
          s.name.c_str(), var.name, (long long)s.batch, (long long)s.lq, (long long)s.lk,
          (long long)s.hq, (long long)s.hkv, (long long)s.d, (long long)s.page, vflops, ms, tflops,
          gms, gtflops, err, faults);
      std::fflush(stdout);
      rows.push_back({s.name, var.name, ms, tflops, gms, gtflops, err});
    }
  }
  std::printf("\nbf16 GEMM ceiling (cuBLAS 8192^3, this run): %.1f TFLOP/s\n", ceiling);
  std::printf("%-36s %-8s %10s %10s %10s %10s %8s %12s\n", "shape", "variant", "flush ms",
              "TFLOP/s", "graph ms", "TFLOP/s", "of ceil", "err_vs_def");
  for (const Row& r : rows) {
    std::printf("%-36s %-8s %10.4f %10.1f %10.4f %10.1f %7.1f%% %12.2e\n", r.shape.c_str(),
                r.variant.c_str(), r.ms, r.tflops, r.graph_ms, r.graph_tflops,
                100.0 * r.graph_tflops / ceiling, r.err);
  }
  return 0;
}
