// The default model (SmolLM2-135M-Instruct, GGUF Q4_1) on the GPU. Exits 77 without a CUDA
// device or when scripts/fetch_model.sh has not fetched the model.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "engine_test_util.h"

namespace kvattn {
namespace {

std::string default_model_path() {
  return std::string(KVATTN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

using test::gpu_options;

TEST(DefaultModelGpu, ChatAnswerNamesParis) {
  LLMOptions o = gpu_options();
  o.model = default_model_path();
  LLM llm(o);
  SamplingParams sp;
  sp.max_tokens = 24;
  auto out = llm.generate({llm.chat_prompt("What is the capital of France?")}, sp);
  std::printf("answer: %s\n", out[0].text.c_str());
  EXPECT_NE(out[0].text.find("Paris"), std::string::npos);
  sp.max_tokens = 128;
  sp.ignore_eos = true;
  llm.generate({llm.chat_prompt("Tell me a story.")}, sp);
  std::printf("SmolLM2 on the GPU: decode %.1f tok/s, prefill %.1f tok/s\n",
              llm.last_stats().decode_tokens_per_second(),
              llm.last_stats().prefill_tokens_per_second());
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  // The CUDA check (gpu_test_main's) comes first, then the model file's.
  if (kvattn::cuda_available() && !std::filesystem::exists(kvattn::default_model_path())) {
    return kvattn::test::skip(
        (kvattn::default_model_path() + " not fetched (scripts/fetch_model.sh)").c_str());
  }
  return kvattn::test::gpu_test_main(argc, argv);
}
