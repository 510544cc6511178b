// POST /v1/responses without a model: the request's translation into the chat request it
// means (messages, limits, text.format, function tools and calls), its refusals (each a 400
// naming the field), the output items as they form, the events' order, numbering and framing,
// and the response object's fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/responses_format.h"
#include "server/responses_stream.h"
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
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
      {R"({"input": "x", "tool_choice": {"type": "file_search"}})", "tool_choice"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice":
          {"type": "function", "name": "g"}})", "tool_choice"},  // chat's check
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})",
       "input[0].arguments"},
      {R"({"input": "x", "max_tool_calls": 0})", "max_tool_calls"},
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
      {R"({"input": [{"type": "reasoning", "summary": []}]})", "input[0].type"},
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

TEST(ResponsesRequest, FunctionToolsAndCallsBecomeChatsTools) {
  const auto r = parse_responses_request(R"({"input": [
      {"role": "user", "content": "weather in Paris and Rome?"},
      {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{\"city\": \"Rome\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "c2", "output": "rain"}],
    "tools": [{"type": "function", "name": "weather", "description": "d", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
    "tool_choice": {"type": "function", "name": "weather"}, "parallel_tool_calls": false})");
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[1].role, "assistant");
  ASSERT_EQ(r.chat.messages[1].tool_calls.size(), 2u);  // consecutive calls: one turn
  EXPECT_EQ(r.chat.messages[1].tool_calls[1].id, "c2");
  EXPECT_EQ(r.chat.messages[1].tool_calls[1].name, "weather");
  EXPECT_EQ(r.chat.messages[2].role, "tool");
  EXPECT_EQ(r.chat.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.chat.messages[3].content, "rain");
  EXPECT_EQ(r.chat.tools.choice, ToolRequest::Choice::kNamed);
  EXPECT_EQ(r.chat.tools.named, "weather");
  EXPECT_FALSE(r.chat.tools.parallel);
  EXPECT_EQ(r.chat.params.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(r.tools[0]["name"], "weather");  // echoed as sent
  EXPECT_FALSE(r.parallel_tool_calls);
  // "auto" / "none" without tools are what OpenAI's SDK may send by default.
  const auto plain = parse_responses_request(R"({"input": "x", "tools": [],
      "tool_choice": "auto"})");
  EXPECT_EQ(plain.chat.tools.choice, ToolRequest::Choice::kNone);
}

TEST(ResponsesFormat, ResponseObjectAndEvents) {
  const auto r = parse_responses_request(R"({"input": "x", "instructions": "i",
      "max_output_tokens": 4})");
  ResponsesMeta m;
  m.id = "resp_1";
  m.model = "model";
  m.created = 5;
  m.request = &r;
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 4;
  u.cached_tokens = 2;
  int ids = 0;
  const auto new_id = [&](const char* prefix) { return prefix + std::to_string(ids++); };

  // Text, a call, more text: message 0 closes before the call, a second message follows.
  ResponsesEvents events;
  ResponsesItems items(m, events, new_id);
  std::string frames = items.text("Hel");
  frames += items.text("lo");
  frames += items.call(ToolCallOut{"call_9", "f", "{\"a\": 1}"});
  frames += items.text("bye");
  frames += items.finish(FinishReason::kStop, u);
  std::vector<Json> evs;
  for (size_t at = 0; (at = frames.find("data: ", at)) != std::string::npos; at += 6) {
    evs.push_back(Json::parse(frames.substr(at + 6, frames.find('\n', at) - at - 6)));
  }
  std::vector<std::string> types;
  for (size_t i = 0; i < evs.size(); ++i) {
    EXPECT_EQ(evs[i]["sequence_number"], i);
    types.push_back(evs[i]["type"]);
  }
  const std::vector<std::string> expected = {
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(types, expected);
  const Json& done = evs.back()["response"];
  EXPECT_EQ(done["object"], "response");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_TRUE(done["incomplete_details"].is_null());
  EXPECT_EQ(done["instructions"], "i");
  EXPECT_EQ(done["max_output_tokens"], 4);
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["output"][1]["type"], "function_call");
  EXPECT_EQ(done["output"][1]["call_id"], "call_9");
  EXPECT_EQ(done["output"][1]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(done["output"][2]["content"][0]["text"], "bye");
  EXPECT_EQ(evs[7]["output_index"], 1);
  EXPECT_EQ(evs[11]["output_index"], 2);
  EXPECT_EQ(done["usage"]["total_tokens"], 14);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 2);

  // Cut by max_output_tokens: incomplete; an output with no text still has its message.
  ResponsesEvents more;
  ResponsesItems cut(m, more, new_id);
  const std::string last = cut.finish(FinishReason::kLength, u);
  const Json r2 = Json::parse(last.substr(last.rfind("data: ") + 6));
  EXPECT_EQ(r2["type"], "response.incomplete");
  EXPECT_EQ(r2["response"]["status"], "incomplete");
  EXPECT_EQ(r2["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r2["response"]["output"][0]["status"], "incomplete");
  EXPECT_EQ(r2["response"]["output"][0]["content"][0]["text"], "");
  ASSERT_EQ(last.rfind("event: ", 0), 0u);
}

}  // namespace
}  // namespace kvattn::server
