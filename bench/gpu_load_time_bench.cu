// The load of an HF checkpoint onto cuda:0, the old way (the safetensors loader widens BF16 to
// float32 host tensors, the CUDA model rounds them back to bf16) against the new one
// (HfLoadOptions::keep_16bit: BF16 read in place from the mapping and uploaded as it is),
// alternately, `--rounds` times each: seconds to the host tensors, to upload them
// (Model::create, which ends synchronized), in all, and the safetensors bytes per second. Then
// both loads' CUDA logits over a prefill and `--steps` decode steps are compared bit for bit
// (on a large checkpoint this reaches the uploader's multi-chunk staging, which the tiny test
// checkpoints of engine_load_16bit_gpu_test do not); exit 1 if any differ.
//   gpu_load_time_bench DIR [--rounds N] [--steps N]       (scripts/gpu_load_time.sh)
// Host code only; a .cu so that only CUDA builds make it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kvattn/engine/model.h"
#include "kvattn/engine/weights.h"
#include "teacher_forced.h"

namespace {

using namespace kvattn;
using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::unique_ptr<Model> load(const std::string& dir, bool keep_16bit) {
  HfLoadOptions o;
  o.keep_16bit = keep_16bit;
  return Model::create(load_hf_model(dir, {}, o), Device::cuda(0), ModelOptions{});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--rounds N] [--steps N]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int rounds = 2, steps = 4;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--steps")) steps = std::max(0, std::atoi(argv[i + 1]));
  }
  double file_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") file_bytes += static_cast<double>(e.file_size());
  }
  for (int round = 1; round <= rounds; ++round) {
    for (bool keep : {false, true}) {
      HfLoadOptions o;
      o.keep_16bit = keep;
      const auto t0 = Clock::now();
      ModelWeights w = load_hf_model(dir, {}, o);
      const auto t1 = Clock::now();
      auto m = Model::create(std::move(w), Device::cuda(0), ModelOptions{});
      const auto t2 = Clock::now();
      m.reset();
      const double total = secs(t0, t2);
      std::printf("load time: %-28s round %d: host tensors %6.2f s, upload %6.2f s, total %6.2f s, "
                  "%5.2f GB/s (%.2f GB of safetensors)\n",
                  keep ? "bf16 kept (new)" : "float32 round trip (old)", round, secs(t0, t1),
                  secs(t1, t2), total, file_bytes / 1e9 / total, file_bytes / 1e9);
      std::fflush(stdout);
    }
  }

  auto a = load(dir, false);
  auto b = load(dir, true);
  const int64_t vocab = a->config().vocab_size;
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(3 + 29 * i);
    for (auto& x : p) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    prompts.push_back(p);
  }
  const auto logits = test::teacher_forced({a.get(), b.get()}, prompts, steps,
                                           /*split_prefill=*/true);
  size_t differ = 0, total = 0;
  for (size_t s = 0; s < logits[0].size(); ++s) {
    total += logits[0][s].size();
    for (size_t i = 0; i < logits[0][s].size(); ++i) {
      differ += std::memcmp(&logits[0][s][i], &logits[1][s][i], sizeof(float)) != 0;
    }
  }
  std::printf("[%s] float32 load vs bf16 load: %zu of %zu logits differ\n", dir.c_str(), differ,
              total);
  return differ == 0 ? 0 : 1;
}
