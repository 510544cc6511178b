// The default model (SmolLM2-135M-Instruct, GGUF Q4_1) on the GPU. Exits 77 without a CUDA
// device or when scripts/fetch_model.sh has not fetched the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
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

// Structured output on the CUDA engine (rows with a grammar are drawn on the host from the
// device's logits): batches of constrained and free rows, graphs on, every constrained text
// whole under its grammar, the free rows answering as they do alone.
TEST(DefaultModelGpu, StructuredOutputBesideFreeRows) {
  LLMOptions o = gpu_options();
  o.model = default_model_path();
  LLM llm(o);
  const char* schema = R"({"type": "object", "properties": {"city": {"type": "string",
      "maxLength": 20}, "population": {"type": "integer", "minimum": 0}},
      "required": ["city", "population"]})";
  SamplingParams json;
  json.max_tokens = 64;
  json.structured.kind = StructuredOutput::Kind::kJsonSchema;
  json.structured.spec = schema;
  SamplingParams free_run;
  free_run.max_tokens = 32;
  const std::string q = llm.chat_prompt("The largest city in Japan and its population, as JSON.");
  const std::string f = llm.chat_prompt("What is the capital of France?");
  const auto alone = llm.generate({f}, free_run);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(llm.add_request(llm.encode(i % 2 ? f : q), i % 2 ? free_run : json));
  }
  std::vector<RequestOutput> done;
  while (llm.has_unfinished_requests()) {
    for (auto& r : llm.step()) done.push_back(std::move(r));
  }
  ASSERT_EQ(done.size(), 6u);
  const auto g = structured::json_schema_grammar(schema);
  for (const auto& r : done) {
    const auto at = std::find(ids.begin(), ids.end(), r.request_id) - ids.begin();
    const bool constrained = at % 2 == 0;
    if (!constrained) {
      EXPECT_NE(r.text.find("Paris"), std::string::npos) << r.text << " / alone: " << alone[0].text;
      continue;
    }
    std::printf("structured on the GPU: %s\n", r.text.c_str());
    EXPECT_EQ(r.finish_reason, FinishReason::kStop) << r.text;
    structured::Matcher m(g);
    EXPECT_TRUE(m.advance(r.text) && m.can_end()) << r.text;
  }
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
