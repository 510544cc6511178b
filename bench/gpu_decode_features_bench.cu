// CUDA decode with issue 18's features, through the public decode_attention (bf16 caches,
// head_dim 128, 32 query / 8 KV heads, pages of 16, random block tables: paged_decode_case.cuh).
// The issue's target: a 4096-key sliding window over a 32k context decodes in <= 1.2x the time
// of a 4096-key context (the pages before the window are never read). Also: the extended
// kernels on a plain shape (a window wider than the context: nothing cut), softcap and ALiBi,
// and the 32k context without a window, for scale.
// Timing: median of --reps CUDA-event timed calls, L2 flushed (memset) before each, after
// do_bench's warm-up (bench_util.cuh); the plan is the library's for the table's capacity.
// One JSON line per row on stdout, then a table.
//
//   gpu_decode_features_bench [--reps N]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "paged_decode_case.cuh"

namespace {

using namespace kvattn;

struct Case {
  std::string name;
  int64_t batch, len;
  int64_t window_left;  // -1: none
  float softcap;
  bool alibi;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
  }
  const int64_t hq = 32, hkv = 8, bs = 16;
  const int64_t kWide = int64_t{1} << 20;  // past every context: extended kernels, nothing cut
  const std::vector<Case> cases = {
      {"1 x 4096", 1, 4096, -1, 0.0f, false},
      {"1 x 4096 ext (wide window)", 1, 4096, kWide, 0.0f, false},
      {"1 x 32k window 4096", 1, 32768, 4095, 0.0f, false},
      {"1 x 32k", 1, 32768, -1, 0.0f, false},
      {"8 x 4096", 8, 4096, -1, 0.0f, false},
      {"8 x 4096 ext (wide window)", 8, 4096, kWide, 0.0f, false},
      {"8 x 32k window 4096", 8, 32768, 4095, 0.0f, false},
      {"8 x 4096 softcap 50", 8, 4096, -1, 50.0f, false},
      {"8 x 4096 alibi", 8, 4096, -1, 0.0f, true},
      {"64 x 4096", 64, 4096, -1, 0.0f, false},
      {"64 x 32k window 4096", 64, 32768, 4095, 0.0f, false},
  };
  init_l2_flush();
  const Device gpu = Device::cuda(0);
  struct Row {
    std::string name;
    double us, tbps;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    std::mt19937_64 rng(7);
    const PagedDecodeCase pc =
        make_paged_decode_case(std::vector<int64_t>(static_cast<size_t>(c.batch), c.len), hq, hkv,
                               bs, rng);
    DecodeArgs a = pc.args();
    a.window_left = c.window_left;
    a.softcap = c.softcap;
    Tensor slopes;
    if (c.alibi) {
      std::vector<float> host(static_cast<size_t>(hq));
      for (int64_t h = 0; h < hq; ++h) host[static_cast<size_t>(h)] = 1.0f / static_cast<float>(2 << (h % 8));
      slopes = Tensor::empty({hq}, DType::kF32, gpu);
      BENCH_CUDA(cudaMemcpy(slopes.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      a.alibi_slopes = slopes;
    }
    a.plan = plan_decode(c.batch, hq, hkv, PagedDecodeCase::kHeadDim, 1, pc.width * bs, gpu);
    Tensor ws;
    if (a.plan.workspace_bytes > 0) {
      ws = Tensor::empty({a.plan.workspace_bytes}, DType::kU8, gpu);
      a.workspace = ws;
    }
    const double us = median_us([&] { decode_attention(a); }, Flush::kMemset, reps);
    // Bytes read: the K and V rows of the keys a call visits (the window's, when there is one).
    const int64_t keys = c.window_left >= 0 ? std::min(c.len, c.window_left + 1) : c.len;
    const double bytes = 2.0 * c.batch * keys * hkv * PagedDecodeCase::kHeadDim * 2;
    rows.push_back({c.name, us, bytes / us * 1e-6});
    std::printf("{\"bench\":\"decode_features\",\"case\":\"%s\",\"batch\":%lld,\"len\":%lld,"
                "\"window_left\":%lld,\"softcap\":%g,\"alibi\":%d,\"heads\":\"%lld/%lld\","
                "\"splits\":%d,\"us\":%.2f,\"tb_s\":%.3f}\n",
                c.name.c_str(), static_cast<long long>(c.batch), static_cast<long long>(c.len),
                static_cast<long long>(c.window_left), c.softcap, c.alibi ? 1 : 0,
                static_cast<long long>(hq), static_cast<long long>(hkv), a.plan.num_splits, us,
                bytes / us * 1e-6);
  }
  std::printf("\n%-30s %10s %12s\n", "case (bf16 d128, 32/8 heads)", "us", "TB/s (read)");
  for (const Row& r : rows) std::printf("%-30s %10.2f %12.3f\n", r.name.c_str(), r.us, r.tbps);
  auto find = [&](const char* name) {
    for (const Row& r : rows) {
      if (r.name == name) return r.us;
    }
    return 0.0;
  };
  for (const char* b : {"1", "8", "64"}) {
    const std::string w = std::string(b) + " x 32k window 4096", p = std::string(b) + " x 4096";
    std::printf("batch %s: window 4096 over 32k / 4096-key context: %.2fx (target <= 1.2x)\n", b,
                find(w.c_str()) / find(p.c_str()));
  }
  std::printf("extended kernels on a plain shape / plain kernels: 1 x 4096 %.2fx, 8 x 4096 %.2fx\n",
              find("1 x 4096 ext (wide window)") / find("1 x 4096"),
              find("8 x 4096 ext (wide window)") / find("8 x 4096"));
  return 0;
}
