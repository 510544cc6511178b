// POST /v1/responses without a model: the request's translation into the chat request it
// means (messages, limits, text.format), its refusals (each a 400 naming the field), the
// response object's fields, and the events' numbering and framing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/responses_format.h"
#include "server/responses_request.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;

ApiError error_of(const std::string& body) {
  try {
    parse_responses_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(ResponsesRequest, InputAndInstructionsBecomeChatMessages) {
  const auto plain = parse_responses_request(R"({"input": "Hello"})");
  ASSERT_EQ(plain.chat.messages.size(), 1u);
  EXPECT_EQ(plain.chat.messages[0].role, "user");
  EXPECT_EQ(plain.chat.messages[0].content, "Hello");
  EXPECT_EQ(plain.chat.endpoint, Endpoint::kChat);
  EXPECT_FALSE(plain.chat.stream);

  const auto r = parse_responses_request(R"({"model": "m", "instructions": "Be brief.",
      "input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                             {"type": "input_text", "text": "b"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                  "text": "c", "annotations": []}, {"type": "refusal", "refusal": "no"}]},
                {"role": "developer", "content": "d"}],
      "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stream": true,
      "store": true, "metadata": {"k": "v"}, "user": "u"})");
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(r.chat.messages[0].content, "Be brief.");
  EXPECT_EQ(r.chat.messages[1].content, "a\nb");  // text parts joined as chat joins them
  EXPECT_EQ(r.chat.messages[2].role, "assistant");
  EXPECT_EQ(r.chat.messages[2].content, "c");
  EXPECT_EQ(r.chat.messages[3].role, "system");  // chat reads developer as system
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_EQ(r.chat.params.max_tokens, 7);
  EXPECT_TRUE(r.chat.max_tokens_given);
  EXPECT_STREQ(r.chat.max_tokens_field, "max_output_tokens");
  EXPECT_FLOAT_EQ(r.chat.params.temperature, 0.5f);
  EXPECT_EQ(r.chat.params.seed, 3u);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_EQ(r.max_output_tokens, 7);
  EXPECT_EQ(r.metadata, Json({{"k", "v"}}));
  EXPECT_EQ(r.user, "u");
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
}

TEST(ResponsesRequest, TextFormatIsStructuredOutput) {
  const auto schema = parse_responses_request(R"({"input": "x", "text": {"format": {"type":
      "json_schema", "name": "city", "strict": true, "schema": {"type": "object",
      "properties": {"name": {"type": "string"}}, "required": ["name"]}}}})");
  EXPECT_EQ(schema.chat.params.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_NE(schema.chat.params.structured.spec.find("\"name\""), std::string::npos);
  EXPECT_EQ(schema.text_format["name"], "city");
  const auto object = parse_responses_request(
      R"({"input": "x", "text": {"format": {"type": "json_object"}}})");
  EXPECT_EQ(object.chat.params.structured.kind, StructuredOutput::Kind::kJsonObject);
  const auto text = parse_responses_request(R"({"input": "x", "text": {"format": {"type":
      "text"}}})");
  EXPECT_FALSE(text.chat.params.structured.active());
}

TEST(ResponsesRequest, RefusalsNameTheField) {
  const struct {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"instructions": "x"})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}]})", "tools"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "include": ["reasoning.encrypted_content"]})", "include"},
      {R"({"input": "x", "reasoning": {"effort": "high"}})", "reasoning"},
      {R"({"input": "x", "top_logprobs": 2})", "top_logprobs"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "max_output_tokens": "9"})", "max_output_tokens"},
      {R"({"input": "x", "n": 2})", "n"},
      {R"({"input": "x", "messages": []})", "messages"},
      {R"({"input": "x", "max_tokens": 5})", "max_tokens"},
      {R"({"input": "x", "text": {"format": {"type": "yaml"}}})", "text.format.type"},
      {R"({"input": "x", "store": "yes"})", "store"},
      {R"({"input": "x", "temperature": 9})", "temperature"},  // chat's check
      {R"({"input": "x", "frobnicate": 1})", "frobnicate"},     // chat's unknown parameter
      {R"({"input": [{"type": "function_call_output", "call_id": "c", "output": "o"}]})",
       "input[0].type"},
      {R"({"input": [{"role": "tool", "content": "o"}]})", "input[0].role"},
      {R"({"input": [{"role": "user"}]})", "input[0].content"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})",
       "input[0].content[0].type"},
  };
  for (const auto& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
  }
  EXPECT_EQ(error_of("{").code(), "invalid_json");
}

TEST(ResponsesFormat, ResponseObjectAndEvents) {
  const auto r = parse_responses_request(R"({"input": "x", "instructions": "i",
      "max_output_tokens": 4})");
  ResponsesMeta m;
  m.id = "resp_1";
  m.message_id = "msg_1";
  m.model = "model";
  m.created = 5;
  m.request = &r;
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 4;
  u.cached_tokens = 2;
  const Json done = finished_response(m, "text", FinishReason::kStop, u);
  EXPECT_EQ(done["object"], "response");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_TRUE(done["incomplete_details"].is_null());
  EXPECT_EQ(done["instructions"], "i");
  EXPECT_EQ(done["max_output_tokens"], 4);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "text");
  EXPECT_EQ(done["output"][0]["status"], "completed");
  EXPECT_EQ(done["usage"]["total_tokens"], 14);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 2);
  const Json cut = finished_response(m, "te", FinishReason::kLength, u);
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");

  ResponsesEvents events;
  const std::string first = events.frame("response.created", {{"response", done}});
  const std::string second = events.frame("response.output_text.delta", {{"delta", "x"}});
  ASSERT_EQ(first.rfind("event: response.created\ndata: ", 0), 0u) << first;
  ASSERT_EQ(second.substr(second.size() - 2), "\n\n");
  const Json e1 = Json::parse(first.substr(first.find("data: ") + 6));
  const Json e2 = Json::parse(second.substr(second.find("data: ") + 6));
  EXPECT_EQ(e1["type"], "response.created");
  EXPECT_EQ(e1["sequence_number"], 0);
  EXPECT_EQ(e2["sequence_number"], 1);
  EXPECT_EQ(e2["delta"], "x");
}

}  // namespace
}  // namespace kvattn::server
