// Helpers shared by the engine tests: error messages (error_of, EXPECT_ERROR_HAS), checkpoint
// paths under tests/data, random prompts,
// greedy SamplingParams, token ids of generate()'s outputs, the GPU LLMOptions, and the main()
// of the GPU tests (exit 77, ctest's skip code, without a CUDA device or without NCCL).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kvattn/core/device.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"

#ifdef KVATTN_WITH_NCCL
#include <cuda_runtime_api.h>
#endif

namespace kvattn::test {

// What f() throws as kvattn::Error, or "(no error)".
std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// stmt throws a kvattn::Error whose message contains text.
#define EXPECT_ERROR_HAS(stmt, text)                                                 \
  do {                                                                               \
    const std::string msg_ = ::kvattn::test::error_of([&] { stmt; });                \
    EXPECT_NE(msg_.find(text), std::string::npos) << "error was: " << msg_;          \
  } while (0)

// tests/data/<name> (a tiny checkpoint: "tiny_llama", "tiny_qwen3").
inline std::string checkpoint(const std::string& name) {
  return std::string(KVATTN_SOURCE_DIR) + "/tests/data/" + name;
}

// n token ids uniform in [3, 319] (inside both tiny vocabularies, clear of special ids).
inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int32_t> d(3, 319);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Greedy (the default SamplingParams), max_tokens long, EOS ignored.
inline SamplingParams greedy(int max_tokens) {
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

// The first completion's token ids of every request, in order.
inline std::vector<std::vector<int32_t>> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& o : outs) t.push_back(o.token_ids);
  return t;
}

// Every completion of every request, in order.
inline std::vector<std::vector<int32_t>> all_samples(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& o : outs) {
    for (const auto& s : o.samples) t.push_back(s.token_ids);
  }
  return t;
}

// An engine on GPU 0 with a 64 MiB KV cache.
inline LLMOptions gpu_options() {
  LLMOptions o;
  o.device = Device::cuda(0);
  o.kv_cache_bytes = 64 << 20;
  return o;
}

// Prints "<why>: skipping" and returns 77 (ctest's SKIP_RETURN_CODE): `return skip(...)` in main().
inline int skip(const char* why) {
  std::printf("%s: skipping\n", why);
  return 77;
}

inline int run_all_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// main() of a GPU test: skips without a CUDA device (or in a build without the CUDA backend).
inline int gpu_test_main(int argc, char** argv,
                         const char* why = "no CUDA device (or no CUDA backend in this build)") {
  if (!cuda_available()) return skip(why);
  return run_all_tests(argc, argv);
}

// main() of an NCCL test: skips in a build without NCCL, without a CUDA device, and (with
// two_gpus) with fewer than two.
inline int nccl_test_main(int argc, char** argv, bool two_gpus = false) {
#ifndef KVATTN_WITH_NCCL
  (void)argc, (void)argv, (void)two_gpus;
  return skip("this build has no NCCL");
#else
  if (!two_gpus) return gpu_test_main(argc, argv, "no CUDA device");
  int n = 0;
  if (!cuda_available() || cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    return skip("fewer than two CUDA devices");
  }
  return run_all_tests(argc, argv);
#endif
}

}  // namespace kvattn::test

// The whole main() of a GPU test that needs nothing but a CUDA device.
#define KVATTN_GPU_TEST_MAIN() \
  int main(int argc, char** argv) { return kvattn::test::gpu_test_main(argc, argv); }
