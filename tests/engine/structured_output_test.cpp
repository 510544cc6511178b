// Structured output through the LLM on the embedded default model (SmolLM2-135M-Instruct,
// Q4_1 GGUF; exits 77, skipped, when scripts/fetch_model.sh has not downloaded it): JSON
// objects, a JSON schema, a regex, a choice and a GBNF grammar, greedy and sampled, n = 2;
// every output ends at the end token with text the grammar accepts whole. Refusals name what
// is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
#include "engine/structured/regex_grammar.h"
#include "kvattn/core/error.h"
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

SamplingParams structured(StructuredOutput::Kind kind, std::string spec = {},
                          std::vector<std::string> choices = {}) {
  SamplingParams p;
  p.max_tokens = 160;
  p.structured.kind = kind;
  p.structured.spec = std::move(spec);
  p.structured.choices = std::move(choices);
  return p;
}

void expect_whole(const std::shared_ptr<const structured::Grammar>& g, const CompletionOutput& o) {
  EXPECT_EQ(o.finish_reason, FinishReason::kStop) << o.text;
  structured::Matcher m(g);
  EXPECT_TRUE(m.advance(o.text) && m.can_end()) << o.text;
}

const char* const kPersonSchema =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0}, "city": {"type": "string", "maxLength": 24}},
        "required": ["name", "age", "city"]})";

TEST(StructuredOutput, GreedyJsonObjectAndSchema) {
  const std::string prompt = llm().chat_prompt("Describe a person as JSON with name, age, city.");
  auto p = structured(StructuredOutput::Kind::kJsonObject);
  const auto obj = llm().generate({prompt}, p);
  std::printf("json_object: %s\n", obj[0].samples[0].text.c_str());
  expect_whole(structured::json_object_grammar(), obj[0].samples[0]);
  EXPECT_TRUE(nlohmann::json::parse(obj[0].samples[0].text).is_object());

  const auto sch = llm().generate({prompt}, structured(StructuredOutput::Kind::kJsonSchema,
                                                       kPersonSchema));
  const std::string& text = sch[0].samples[0].text;
  std::printf("json_schema: %s\n", text.c_str());
  expect_whole(structured::json_schema_grammar(kPersonSchema), sch[0].samples[0]);
  const auto v = nlohmann::ordered_json::parse(text);
  ASSERT_TRUE(v.is_object());
  EXPECT_TRUE(v["name"].is_string());
  EXPECT_TRUE(v["age"].is_number_integer() && v["age"].get<int64_t>() >= 0);
  EXPECT_TRUE(v["city"].is_string());
  std::vector<std::string> keys;
  for (const auto& [k, _] : v.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "age", "city"}));
}

TEST(StructuredOutput, RegexAndChoice) {
  const auto re = llm().generate(
      {llm().chat_prompt("Give me a phone number.")},
      structured(StructuredOutput::Kind::kRegex, R"(\(\d{3}\) \d{3}-\d{4})"));
  const std::string& phone = re[0].samples[0].text;
  std::printf("regex: %s\n", phone.c_str());
  EXPECT_TRUE(std::regex_match(phone, std::regex(R"(\(\d{3}\) \d{3}-\d{4})"))) << phone;
  EXPECT_EQ(re[0].samples[0].finish_reason, FinishReason::kStop);

  const auto ch = llm().generate(
      {llm().chat_prompt("What is the capital of France? Answer with the city only.")},
      structured(StructuredOutput::Kind::kChoice, "", {"London", "Paris", "Berlin", "Rome"}));
  std::printf("choice: %s\n", ch[0].samples[0].text.c_str());
  EXPECT_EQ(ch[0].samples[0].text, "Paris");
}

TEST(StructuredOutput, GbnfGrammar) {
  // llama.cpp's GBNF: a sentence of fixed shape with a free part in a class.
  const char* gbnf = R"(root ::= "Answer: " answer "." ("\n" note)?
answer ::= "yes" | "no"
note ::= [A-Za-z ,]{1,40}
)";
  const auto out = llm().generate({llm().chat_prompt("Is the sky blue?")},
                                  structured(StructuredOutput::Kind::kGrammar, gbnf));
  const std::string& t = out[0].samples[0].text;
  std::printf("gbnf: %s\n", t.c_str());
  EXPECT_TRUE(std::regex_match(t, std::regex(R"(Answer: (yes|no)\.(\n[A-Za-z ,]{1,40})?)"))) << t;
  EXPECT_EQ(out[0].samples[0].finish_reason, FinishReason::kStop);
}

TEST(StructuredOutput, SampledSamplesAllFollowTheSchema) {
  auto p = structured(StructuredOutput::Kind::kJsonSchema, kPersonSchema);
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.n = 2;
  p.seed = 7;
  const auto g = structured::json_schema_grammar(kPersonSchema);
  const auto out = llm().generate(
      {llm().chat_prompt("Invent a person, as JSON."), llm().chat_prompt("Another one.")}, p);
  for (const auto& r : out) {
    ASSERT_EQ(r.samples.size(), 2u);
    for (const auto& o : r.samples) {
      std::printf("sampled: %s\n", o.text.c_str());
      expect_whole(g, o);
    }
  }
  // The same seed draws the same text.
  const auto again = llm().generate({llm().chat_prompt("Invent a person, as JSON.")}, p);
  EXPECT_EQ(again[0].samples[0].text, out[0].samples[0].text);
}

TEST(StructuredOutput, MinTokensYieldsToACompleteStructure) {
  auto p = structured(StructuredOutput::Kind::kChoice, "", {"yes", "no"});
  p.min_tokens = 20;
  const auto out = llm().generate({llm().chat_prompt("Is water wet?")}, p);
  const std::string& t = out[0].samples[0].text;
  EXPECT_TRUE(t == "yes" || t == "no") << t;
  EXPECT_EQ(out[0].samples[0].finish_reason, FinishReason::kStop);
}

void expect_refused(const SamplingParams& p, const std::string& words) {
  try {
    llm().generate({std::string("hi")}, p);
    ADD_FAILURE() << "accepted; expected an error naming " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(StructuredOutput, RefusalsNameTheProblem) {
  auto p = structured(StructuredOutput::Kind::kJsonObject);
  p.ignore_eos = true;
  expect_refused(p, "ignore_eos");
  expect_refused(structured(StructuredOutput::Kind::kJsonSchema, R"({"type": "integer",
      "multipleOf": 3})"), "multipleOf");
  expect_refused(structured(StructuredOutput::Kind::kRegex, "a(?=b)"), "lookahead");
  expect_refused(structured(StructuredOutput::Kind::kChoice), "at least one choice");
  expect_refused(structured(StructuredOutput::Kind::kGrammar, "root ::= missing"), "missing");
  // The engine still serves after the refusals.
  const auto ok = llm().generate({llm().chat_prompt("Say yes.")},
                                 structured(StructuredOutput::Kind::kChoice, "", {"yes"}));
  EXPECT_EQ(ok[0].samples[0].text, "yes");
}

// LLM::prepare_structured (a server's request thread) names a bad spec as add_request does,
// and compiles beside a thread that steps the engine: each prepared structure then serves.
TEST(StructuredOutput, PreparedOnOtherThreadsWhileTheEngineSteps) {
  try {
    llm().prepare_structured(structured(StructuredOutput::Kind::kRegex, "a(?=b)").structured);
    ADD_FAILURE() << "a lookahead was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lookahead"), std::string::npos) << e.what();
  }
  std::vector<SamplingParams> params;
  for (int i = 0; i < 6; ++i) {  // distinct specs, none compiled before
    params.push_back(structured(StructuredOutput::Kind::kRegex,
                                "(yes|no)-" + std::to_string(1000 + i) + "[a-c]{0," +
                                    std::to_string(i + 1) + "}"));
  }
  const uint64_t busy = llm().add_request(llm().encode(llm().chat_prompt("Count to ten.")),
                                          structured(StructuredOutput::Kind::kJsonObject));
  std::vector<std::thread> threads;
  std::atomic<int> failures = 0;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (const auto& p : params) {
        try {
          llm().prepare_structured(p.structured);
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  }
  bool done = false;
  while (llm().has_unfinished_requests()) {
    for (const auto& r : llm().step()) done = done || r.request_id == busy;
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(failures.load(), 0);
  const std::vector<std::string> prompts(params.size(), llm().chat_prompt("Answer yes or no."));
  const auto out = llm().generate(std::vector<std::vector<int32_t>>(
                                      params.size(), llm().encode(prompts[0])),
                                  params);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& text = out[i].samples[0].text;
    EXPECT_TRUE(std::regex_match(text, std::regex(params[i].structured.spec))) << text;
  }
}

}  // namespace
}  // namespace kvattn

int main(int argc, char** argv) {
  if (!std::filesystem::exists(kvattn::kModel)) {
    std::printf("skipped: %s not downloaded (scripts/fetch_model.sh)\n", kvattn::kModel.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
