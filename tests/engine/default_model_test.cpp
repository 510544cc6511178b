// The embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF, llama architecture with
// interleaved-pair RoPE): greedy answers must be the expected ones. Exits 77 (ctest: skipped)
// when scripts/fetch_model.sh has not downloaded the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kvattn/engine/llm.h"

namespace kvattn {
namespace {

const std::string kModel =
    std::string(KVATTN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

LLM& llm() {
  static LLM instance([] {
    LLMOptions o;
    o.model = kModel;
    o.kv_cache_bytes = 64 << 20;
    return o;
  }());
  return instance;
}

TEST(DefaultModel, ConfigIsSmolLM2) {
  const ModelConfig& c = llm().config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.rope_style, ModelConfig::RopeStyle::kInterleaved);
  EXPECT_TRUE(llm().has_chat_template());
}

TEST(DefaultModel, GreedyChatAnswerNamesParis) {
  SamplingParams sp;
  sp.max_tokens = 24;
  std::string streamed;
  auto out = llm().generate({llm().chat_prompt("What is the capital of France?")}, sp,
                            [&](const TokenEvent& e) { streamed += e.text; });
  std::printf("answer: %s\n", out[0].text.c_str());
  EXPECT_NE(out[0].text.find("Paris"), std::string::npos) << out[0].text;
  EXPECT_EQ(streamed, out[0].text);
}

TEST(DefaultModel, GreedyCompletionIsDeterministicAndBatchIndependent) {
  SamplingParams sp;
  sp.max_tokens = 12;
  const std::string p = "The capital of France is";
  auto one = llm().generate({p}, sp)[0];
  std::printf("completion: %s\n", one.text.c_str());
  EXPECT_NE(one.text.find("Paris"), std::string::npos) << one.text;
  auto two = llm().generate({"Once upon a time", p}, sp);
  EXPECT_EQ(two[1].token_ids, one.token_ids);
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  if (!std::filesystem::exists(kvattn::kModel)) {
    std::printf("default model %s absent (run scripts/fetch_model.sh): skipping\n",
                kvattn::kModel.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
