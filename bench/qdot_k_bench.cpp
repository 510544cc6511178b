// K-quant matrix-vector products (Q4_K, Q5_K, Q6_K) per qdot ISA path, one thread, on a
// synthetic seeded matrix (random quant bits, scales in range, fp16 d ~ 2^-8): out[i] =
// dot(weight row i, x) for every row, the activation row(s) quantized once outside the timing.
// Paths alternate round by round (the machine may be shared: compare rounds, not single runs);
// prints min / median / max of ns per matrix and the weights' GB/s at the median.
//   build/bench/qdot_k_bench [rounds=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/model/qdot/qdot.h"

namespace {

using namespace kvattn;
using namespace kvattn::qdot;

std::vector<uint8_t> make_matrix(GgmlType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const int64_t bytes = block_bytes(t), blocks = rows * n / 256;
  std::vector<uint8_t> m(blocks * bytes);
  for (auto& b : m) b = static_cast<uint8_t>(rng());
  const uint16_t d = 0x1C00;  // 2^-8 in fp16: finite and normal
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = m.data() + b * bytes;
    if (t == GgmlType::kQ6_K) {
      std::memcpy(blk + 208, &d, 2);
    } else {
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &d, 2);
    }
  }
  return m;
}

double time_once(Kernel k, const uint8_t* m, int64_t row_bytes, int64_t rows, const ActRow* x,
                 int nx, int64_t n, float* out) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < rows; ++i) k(m + i * row_bytes, x, nx, n, out + i, rows);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  std::vector<Isa> isas = {Isa::kAvx2};
  if (best_isa() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  if (best_isa() >= Isa::kAvx512Vnni) isas.push_back(Isa::kAvx512Vnni);
  std::mt19937 rng(21);
  const struct { int64_t rows, n; } shapes[] = {{576, 1536}, {4096, 4096}};
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    for (const auto& s : shapes) {
      const std::vector<uint8_t> m = make_matrix(t, s.rows, s.n, rng);
      const int64_t row_bytes = s.n / 256 * block_bytes(t);
      for (int nx : {1, 4}) {
        std::vector<float> x(nx * s.n);
        std::normal_distribution<float> g;
        for (float& v : x) v = g(rng);
        ActRows a;
        a.quantize(x.data(), s.n, nx, s.n, false, true);
        std::vector<ActRow> ar;
        for (int r = 0; r < nx; ++r) ar.push_back(a.row(r));
        std::vector<float> out(s.rows * nx);
        std::vector<std::vector<double>> ns(isas.size());
        // each sample: the best of enough repetitions for ~20 ms
        const int reps = std::max<int64_t>(1, 20'000'000 / (s.rows * s.n / 8));
        for (int round = 0; round < rounds; ++round) {
          for (size_t i = 0; i < isas.size(); ++i) {
            const Kernel k = kernel(t, isas[i]);
            double best = 1e30;
            for (int rep = 0; rep < reps; ++rep) {
              best = std::min(best, time_once(k, m.data(), row_bytes, s.rows, ar.data(), nx,
                                              s.n, out.data()));
            }
            ns[i].push_back(best);
          }
        }
        for (size_t i = 0; i < isas.size(); ++i) {
          std::vector<double> v = ns[i];
          std::sort(v.begin(), v.end());
          const double med = v[v.size() / 2];
          std::printf("%-4s %5lldx%-5lld x%d %-12s min %9.0f med %9.0f max %9.0f ns  %6.2f GB/s  %.2fx avx2\n",
                      std::string(ggml_type_name(t)).c_str(), static_cast<long long>(s.rows),
                      static_cast<long long>(s.n), nx, std::string(isa_name(isas[i])).c_str(),
                      v.front(), med, v.back(), m.size() / med,
                      [&] { std::vector<double> a2 = ns[0]; std::sort(a2.begin(), a2.end());
                            return a2[a2.size() / 2] / med; }());
        }
      }
    }
  }
  return 0;
}
