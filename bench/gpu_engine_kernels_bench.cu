// The CUDA model's "other" kernels (issue 20: everything in a layer that is neither a GEMM nor
// attention), each timed as the engine runs it, by CUDA-graph replay (one captured launch,
// plain, no PDL), median of --reps after an L2 flush (a 256 MB read: the kernel's own traffic
// from HBM), at T = 1, 8, 256, 4096 and 16384 tokens for Qwen3-0.6B (hidden 1024, inter 3072,
// 16 q / 8 kv heads of 128) and SmolLM2-135M (576, 1536, 9 / 3 heads of 64). Every kernel is
// timed twice in the same run: the issue-20 kernel ("new") and the one before it ("legacy",
// cuda_kernels.h's legacy_kernels()), so one run says what the rewrite bought; outputs are
// not compared here (row_kernels_gpu_test and fused_rope_kv_gpu_test do that byte for byte).
//
// Prints one JSON line per timing: {"op", "model", "T", "variant", "us", "bytes", "TBps",
// "frac_copy", "floor_us"}: bytes are what the kernel must read and write once (weights
// included), frac_copy its TB/s over a 2 GiB device copy's measured in the same run,
// floor_us the bytes at that copy rate. Then a table, and last, per model, one layer's other
// kernels (2 add_rmsnorm + qk_norm_rope_store_kv + silu_mul) at each T, legacy vs new, times
// the layer count: the "other" share of a prefill step the rewrite should remove. Also timed,
// once: the final norm on 8 logit rows, and sampling (greedy and top-k/top-p over Qwen3's
// vocabulary, 1 and 256 rows; unchanged, "current").
//   gpu_engine_kernels_bench [--reps N] [--quick] [--only NAME]   (NAME: a substring of op)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kvattn/core/tensor.h"
#include "kvattn/kernels/device_faults.h"
#include "engine/model/cuda_kernels.h"
#include "engine/model/cuda_rope_kv.h"
#include "engine/model/cuda_sampling.h"
#include "bench_util.cuh"

namespace {

namespace k = kvattn::cuda_model;
using kvattn::DType;
using kvattn::Tensor;
const kvattn::Device kGpu = kvattn::Device::cuda(0);

int g_reps = 200;
double g_copy_tbps = 0.0;
double g_graph_floor_us = 0.0;

struct Shape {
  const char* model;
  int64_t hidden, inter, heads, kv_heads, head_dim, layers;
};
const Shape kQwen06{"qwen3-0.6b", 1024, 3072, 16, 8, 128, 28};
const Shape kSmol{"smollm2-135m", 576, 1536, 9, 3, 64, 30};

struct Row {
  std::string op, model, variant;
  int64_t T;
  double us, bytes;
};
std::vector<Row> g_rows;

void report(const std::string& op, const std::string& model, int64_t T,
            const std::string& variant, double us, double bytes) {
  const double tbps = bytes / (us * 1e-6) / 1e12;
  const double floor_us = g_copy_tbps > 0 ? bytes / (g_copy_tbps * 1e12) * 1e6 : 0.0;
  std::printf("{\"op\": \"%s\", \"model\": \"%s\", \"T\": %lld, \"variant\": \"%s\", \"us\": %.2f, "
              "\"bytes\": %.0f, \"TBps\": %.3f, \"frac_copy\": %.3f, \"floor_us\": %.2f}\n",
              op.c_str(), model.c_str(), static_cast<long long>(T), variant.c_str(), us, bytes,
              tbps, g_copy_tbps > 0 ? tbps / g_copy_tbps : 0.0, floor_us);
  std::fflush(stdout);
  g_rows.push_back({op, model, variant, T, us, bytes});
}

// Median time of one replay of a graph holding what `launch` enqueues on its stream.
double graph_us(const std::function<void(cudaStream_t)>& launch) {
  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(s);  // eager once: lazy allocations (the fault word) happen outside the capture
  BENCH_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(s);
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  // The legacy default stream, so median_us's events and flush order with the replays.
  const double us = median_us([&] { BENCH_CUDA(cudaGraphLaunch(exec, 0)); }, Flush::kRead, g_reps);
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(g));
  BENCH_CUDA(cudaStreamDestroy(s));
  return us;
}

// Times `launch` with the new kernels and with the legacy ones (the flag is read when the
// wrapper launches, so each capture holds its variant's kernel).
void time_both(const std::string& op, const Shape& m, int64_t T, double bytes,
               const std::function<void(cudaStream_t)>& launch) {
  for (bool legacy : {true, false}) {
    k::set_legacy_kernels(legacy);
    const double us = graph_us(launch);
    report(op, m.model, T, legacy ? "legacy" : "new", us, bytes);
  }
  k::set_legacy_kernels(false);
  const uint32_t f = kvattn::read_device_faults(kGpu, true);
  if (f != 0) {
    std::fprintf(stderr, "%s: device fault word 0x%x\n", op.c_str(), f);
    std::exit(1);
  }
}

Tensor random_bf16(int64_t n, uint32_t seed) {
  Tensor t = Tensor::empty({n}, DType::kBF16, kGpu);
  fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(t.data()), n, seed);
  BENCH_CUDA(cudaGetLastError());
  return t;
}

Tensor iota_i32(int64_t n, int64_t mod) {
  std::vector<int32_t> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = static_cast<int32_t>(i % mod);
  Tensor c = Tensor::empty({n}, DType::kI32);
  std::memcpy(c.data(), h.data(), n * 4);
  return c.to(kGpu);
}

bool wanted(const std::string& only, const char* op) {
  return only.empty() || std::string(op).find(only) != std::string::npos;
}

void bench_model(const Shape& m, int64_t T, const std::string& only) {
  const int64_t H = m.hidden, I = m.inter, D = m.head_dim;
  const int64_t qkv_dim = (m.heads + 2 * m.kv_heads) * D;
  const double e = 2.0;  // bytes per bf16
  Tensor x = random_bf16(T * H, 1), add = random_bf16(T * H, 2), w = random_bf16(H, 3);
  Tensor out = Tensor::empty({T * H}, DType::kBF16, kGpu);
  const float eps = 1e-6f;

  if (wanted(only, "add_rmsnorm")) {
    // The per-layer norms: x += o (written back), h = norm(x).
    time_both("add_rmsnorm", m, T, e * (4.0 * T * H + H), [&](cudaStream_t s) {
      k::add_rmsnorm(x.data(), add.data(), w.data(), eps, out.data(), nullptr, T, H, s);
    });
  }
  if (wanted(only, "final_norm") && T >= 8) {
    // The final norm on the logit rows only (8 rows of the T: a prefill step's last tokens).
    Tensor rows = iota_i32(8, T);
    time_both("final_norm_rows8", m, T, e * 8.0 * 3 * H, [&](cudaStream_t s) {
      k::add_rmsnorm(x.data(), add.data(), w.data(), eps, out.data(), rows.ptr<const int32_t>(),
                     8, H, s);
    });
  }
  if (wanted(only, "embed_rmsnorm")) {
    const int64_t vocab = 4096;
    Tensor table = random_bf16(vocab * H, 4);
    Tensor ids = iota_i32(T, vocab);
    time_both("embed_rmsnorm", m, T, e * (3.0 * T * H + H) + 4.0 * T, [&](cudaStream_t s) {
      k::embed_rmsnorm(table.data(), ids.ptr<const int32_t>(), T, H, 0, vocab, w.data(), eps,
                       x.data(), out.data(), s);
    });
  }
  if (wanted(only, "silu_mul")) {
    Tensor gate_up = random_bf16(T * 2 * I, 5);
    Tensor act = Tensor::empty({T * I}, DType::kBF16, kGpu);
    time_both("silu_mul", m, T, e * 3.0 * T * I, [&](cudaStream_t s) {
      k::silu_mul(gate_up.data(), T, I, act.data(), s);
    });
  }
  if (wanted(only, "qk_norm_rope") || wanted(only, "add_bias")) {
    Tensor qkv = random_bf16(T * qkv_dim, 6);
    Tensor qn = random_bf16(D, 7), kn = random_bf16(D, 8);
    Tensor pos = iota_i32(T, 1 << 30);
    k::QkNormRope rope;
    rope.qkv = qkv.data();
    rope.ld = qkv_dim;
    rope.tokens = T;
    rope.num_heads = m.heads;
    rope.num_kv_heads = m.kv_heads;
    rope.head_dim = D;
    rope.q_norm = qn.data();
    rope.k_norm = kn.data();
    rope.eps = eps;
    rope.positions = pos.ptr<const int32_t>();
    rope.theta = 1000000.0f;
    const double qk = static_cast<double>(m.heads + m.kv_heads) * D * T;
    const double kv = static_cast<double>(m.kv_heads) * D * T;
    if (wanted(only, "qk_norm_rope")) {
      // The engine's fused form, bf16 cache of 16-token blocks, slots 0..T-1.
      const int64_t bs = 16, blocks = (T + bs - 1) / bs;
      Tensor kc = Tensor::empty({blocks, bs, m.kv_heads, D}, DType::kBF16, kGpu);
      Tensor vc = Tensor::empty({blocks, bs, m.kv_heads, D}, DType::kBF16, kGpu);
      Tensor slots = iota_i32(T, 1 << 30);
      k::KVWrite kvw{kc.view(), vc.view(), {}, {}, slots.view()};
      time_both("qk_norm_rope_store_kv", m, T, e * (qk + kv + qk + 2 * kv + 2 * D) + 8.0 * T,
                [&](cudaStream_t s) { k::qk_norm_rope_store_kv(rope, kvw, s); });
      time_both("qk_norm_rope", m, T, e * (2 * qk + 2 * D) + 4.0 * T,
                [&](cudaStream_t s) { k::qk_norm_rope(rope, s); });
    }
    if (wanted(only, "add_bias")) {  // Qwen2's qkv bias (not Qwen3's; for completeness)
      Tensor bias = random_bf16(qkv_dim, 9);
      time_both("add_bias", m, T, e * (2.0 * T * qkv_dim + qkv_dim), [&](cudaStream_t s) {
        k::add_bias(qkv.data(), qkv_dim, T, qkv_dim, bias.data(), s);
      });
    }
  }
  BENCH_CUDA(cudaDeviceSynchronize());
}

// Sampling (cuda_sampling.h): R rows of a 151,936-id vocabulary (Qwen3), greedy, temperature
// 0.6 alone (what `kvattn bench` samples with) and top-k 50 / top-p 0.9; one CTA per row
// ("one_cta") against the split form for small batches ("split"; the default), and the split
// form with the top-k / top-p selects in thread block clusters ("split_clusters";
// KVATTN_SAMPLE_CLUSTERS=1). The same tokens every way (checked here too).
void bench_sampling() {
  const int64_t vocab = 151936;
  Tensor scratch = Tensor::empty({k::kSampleScratchBytes}, DType::kU8, kGpu);
  const char* kinds[] = {"sample_greedy", "sample_t0.6", "sample_topk50_topp0.9"};
  for (int64_t R : {1, 4, 256}) {
    Tensor logits = random_bf16(R * vocab, 11);
    Tensor tokens = Tensor::empty({R}, DType::kI32, kGpu);
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<k::SampleParams> h(R);
      for (int64_t r = 0; r < R; ++r) {
        h[r].mode = kind == 0 ? k::kSampleGreedy : k::kSampleRandom;
        h[r].inv_temperature = kind == 0 ? 1.0f : 1.0f / 0.6f;
        h[r].top_k = kind == 2 ? 50 : 0;
        h[r].top_p = kind == 2 ? 0.9f : 1.0f;
        h[r].seed = 1234;
        h[r].stream = static_cast<uint64_t>(r);
      }
      Tensor hp = Tensor::empty({R * static_cast<int64_t>(sizeof(k::SampleParams))}, DType::kU8);
      std::memcpy(hp.data(), h.data(), h.size() * sizeof(k::SampleParams));
      Tensor dp = hp.to(kGpu);
      // one CTA per row; split with the selects on slice 0; split with the selects in clusters
      const char* forms[] = {"one_cta", "split", "split_clusters"};
      std::vector<int32_t> got[3];
      for (int form = 0; form < 3; ++form) {
        const int max_slices = form > 0 ? static_cast<int>(k::kSampleMaxSlices) : 1;
        const double us = graph_us([&](cudaStream_t s) {
          k::sample_rows(logits.data(), vocab, R, vocab,
                         static_cast<const k::SampleParams*>(dp.data()), tokens.ptr<int32_t>(),
                         scratch.data(), s, max_slices, form == 2 ? 1 : 0);
        });
        Tensor host = tokens.to(kvattn::Device::cpu());
        got[form].assign(host.ptr<int32_t>(), host.ptr<int32_t>() + R);
        report(kinds[kind], "qwen3-vocab", R, forms[form], us, 2.0 * R * vocab);
        if (got[form] != got[0]) {
          std::printf("ERROR: %s R=%ld: the %s form drew other tokens\n", kinds[kind],
                      static_cast<long>(R), forms[form]);
        }
      }
    }
  }
}

void bench_copy() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemset(a, 1, bytes));
  const double us = median_us(
      [&] { BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, Flush::kNone, 5);
  g_copy_tbps = 2.0 * bytes / (us * 1e-6) / 1e12;
  std::printf("{\"op\": \"ceiling\", \"shape\": \"d2d copy 2 GiB (read+write)\", \"us\": %.2f, "
              "\"TBps\": %.3f}\n", us, g_copy_tbps);
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
}

__global__ void empty_kernel() {}

void bench_graph_floor() {
  g_graph_floor_us = graph_us([](cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); });
  std::printf("{\"op\": \"floor\", \"shape\": \"graph of one empty kernel\", \"us\": %.2f}\n",
              g_graph_floor_us);
}

double find_us(const std::string& op, const std::string& model, int64_t T,
               const std::string& variant) {
  for (const Row& r : g_rows) {
    if (r.op == op && r.model == model && r.T == T && r.variant == variant) return r.us;
  }
  return -1.0;
}

void summary(const std::vector<Shape>& shapes, const std::vector<int64_t>& tokens) {
  std::printf("\n%-22s %-13s %6s %10s %10s %8s %9s %9s\n", "op", "model", "T", "legacy us",
              "new us", "speedup", "new TB/s", "frac_copy");
  for (const Row& r : g_rows) {
    if (r.variant == "legacy") continue;
    const double old = find_us(r.op, r.model, r.T, "legacy");
    const double tbps = r.bytes / (r.us * 1e-6) / 1e12;
    const std::string old_s = old > 0 ? std::to_string(old).substr(0, 8) : "-";
    const std::string ratio = old > 0 ? std::to_string(old / r.us).substr(0, 5) + "x" : "-";
    std::printf("%-22s %-13s %6lld %10s %10.2f %8s %9.3f %9.3f\n", r.op.c_str(), r.model.c_str(),
                static_cast<long long>(r.T), old_s.c_str(), r.us, ratio.c_str(), tbps,
                tbps / g_copy_tbps);
  }
  // One layer's other kernels as the engine launches them in a prefill step, times the layers.
  std::printf("\n# per step: layers x (2 add_rmsnorm + qk_norm_rope_store_kv + silu_mul), "
              "graph floor %.2f us each not subtracted\n", g_graph_floor_us);
  for (const Shape& m : shapes) {
    for (int64_t T : tokens) {
      double sum[2] = {0.0, 0.0};
      bool ok = true;
      for (int v = 0; v < 2; ++v) {
        const char* variant = v == 0 ? "legacy" : "new";
        const double n = find_us("add_rmsnorm", m.model, T, variant);
        const double q = find_us("qk_norm_rope_store_kv", m.model, T, variant);
        const double s = find_us("silu_mul", m.model, T, variant);
        ok = ok && n > 0 && q > 0 && s > 0;
        sum[v] = m.layers * (2 * n + q + s);
      }
      if (!ok) continue;
      std::printf("{\"op\": \"layers_other\", \"model\": \"%s\", \"T\": %lld, \"legacy_ms\": %.3f, "
                  "\"new_ms\": %.3f, \"saved_ms\": %.3f}\n",
                  m.model, static_cast<long long>(T), sum[0] / 1000, sum[1] / 1000,
                  (sum[0] - sum[1]) / 1000);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (!kvattn::cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MB, reps %d (median), graph replay, L2 flush: read\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, g_reps);
  init_l2_flush();
  bench_copy();
  bench_graph_floor();
  const std::vector<int64_t> tokens =
      quick ? std::vector<int64_t>{1, 4096} : std::vector<int64_t>{1, 8, 256, 4096, 16384};
  const std::vector<Shape> shapes = {kQwen06, kSmol};
  for (const Shape& m : shapes) {
    for (int64_t T : tokens) bench_model(m, T, only);
  }
  if (wanted(only, "sample")) bench_sampling();
  summary(shapes, tokens);
  return 0;
}
