// The request side of tool calling: tools / tool_choice / parallel_tool_calls and the history's
// tool calls and results land in ParsedRequest; every bad field is a 400 naming it; "required"
// and named choices become the JSON Schema constraint vLLM builds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/request_parser.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;
using Choice = ToolRequest::Choice;

const std::string kMsgs = R"("messages": [{"role": "user", "content": "weather?"}])";
const std::string kTools = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "d",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}, "strict": true}},
  {"type": "function", "function": {"name": "now-2"}}])";

ParsedRequest chat(const std::string& fields) {
  return parse_request("{" + kMsgs + (fields.empty() ? "" : ", " + fields) + "}", Endpoint::kChat);
}

ApiError error_of(const std::string& body) {
  try {
    parse_request(body, Endpoint::kChat);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

TEST(ToolRequest, ChoiceDefaultsAndForms) {
  EXPECT_EQ(chat("").tools.choice, Choice::kNone);
  const ParsedRequest a = chat(kTools);
  EXPECT_EQ(a.tools.choice, Choice::kAuto);  // tools given: "auto"
  ASSERT_EQ(a.tools.tools.size(), 2u);
  EXPECT_EQ(a.tools.tools[0].name, "get_weather");
  EXPECT_TRUE(a.tools.tools[1].parameters.is_null());
  EXPECT_TRUE(a.tools.parallel);
  EXPECT_FALSE(a.params.structured.active());
  // The template gets the tools as sent, key order kept.
  EXPECT_EQ(Json::parse(a.tools.tools_json)[0]["function"].begin().key(), "name");
  EXPECT_EQ(Json::parse(a.tools.tools_json)[0]["function"]["parameters"].begin().key(), "type");
  EXPECT_EQ(chat(kTools + R"(, "tool_choice": "none")").tools.choice, Choice::kNone);
  EXPECT_EQ(chat(R"("tool_choice": "none")").tools.choice, Choice::kNone);
  EXPECT_EQ(chat(R"("tools": [])").tools.tools_json, "");
  const ParsedRequest n = chat(
      kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "now-2"}})");
  EXPECT_EQ(n.tools.choice, Choice::kNamed);
  EXPECT_EQ(n.tools.named, "now-2");
  EXPECT_FALSE(chat(kTools + R"(, "parallel_tool_calls": false)").tools.parallel);
}

TEST(ToolRequest, RequiredAndNamedBecomeSchemas) {
  using Kind = StructuredOutput::Kind;
  const ParsedRequest n = chat(
      kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(n.params.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(Json::parse(n.params.structured.spec),
            Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]})"));
  // No parameters: an object without members.
  const ParsedRequest e =
      chat(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "now-2"}})");
  EXPECT_EQ(Json::parse(e.params.structured.spec),
            Json::parse(R"({"type": "object", "properties": {}})"));
  for (const bool parallel : {true, false}) {
    const ParsedRequest r = chat(kTools + R"(, "tool_choice": "required", "parallel_tool_calls": )" +
                                 (parallel ? "true" : "false"));
    EXPECT_EQ(r.params.structured.kind, Kind::kJsonSchema);
    const Json s = Json::parse(r.params.structured.spec);
    EXPECT_EQ(s["type"], "array");
    EXPECT_EQ(s["minItems"], 1);
    EXPECT_EQ(s.contains("maxItems"), !parallel);
    ASSERT_EQ(s["items"]["anyOf"].size(), 2u);
    const Json& w = s["items"]["anyOf"][0];
    EXPECT_EQ(w["properties"]["name"], Json::parse(R"({"const": "get_weather"})"));
    EXPECT_EQ(w["properties"]["parameters"]["required"], Json::parse(R"(["city"])"));
    EXPECT_EQ(w["required"], Json::parse(R"(["name", "parameters"])"));
    EXPECT_EQ(w["additionalProperties"], false);
  }
  // Local references follow their schema into the list.
  const ParsedRequest ref = chat(R"("tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"$defs": {"p": {"type": "integer", "default": {"$ref": "#/keep"}}},
                     "type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}}}}],
      "tool_choice": "required")");
  const Json p = Json::parse(ref.params.structured.spec)["items"]["anyOf"][0]["properties"]
                            ["parameters"];
  EXPECT_EQ(p["properties"]["x"]["$ref"], "#/items/anyOf/0/properties/parameters/$defs/p");
  EXPECT_EQ(p["$defs"]["p"]["default"]["$ref"], "#/keep");  // data, not a schema
}

TEST(ToolRequest, HistoryWithCallsAndResults) {
  const ParsedRequest r = parse_request(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "12:00"}]},
      {"role": "assistant", "tool_calls": [
        {"id": "c3", "type": "function", "function": {"name": "now", "arguments": "{}"}}]}]})",
                                        Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].content, "");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[3].content, "12:00");
  EXPECT_EQ(r.messages[4].tool_calls.size(), 1u);  // content may be left out next to calls
}

TEST(ToolRequest, BadFieldsNameThemselves) {
  const std::string f = R"({"type": "function", "function": {"name": "f"}})";
  // {fields, param, a word the message must hold}
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {R"("tools": {})", "tools", "list"},
      {R"("tools": [3])", "tools", "object"},
      {R"("tools": [{"type": "code", "function": {"name": "f"}}])", "tools", "\"code\""},
      {R"("tools": [{"function": {"name": "f"}}])", "tools", "type is missing"},
      {R"("tools": [{"type": "function"}])", "tools", "function must be an object"},
      {R"("tools": [{"type": "function", "function": {"name": "a b"}}])", "tools", "^[a-zA-Z0-9_-]{1,64}$"},
      {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools", "{1,64}"},
      {R"("tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'x') + R"("}}])",
       "tools", "{1,64}"},
      {R"("tools": [{"type": "function", "function": {"name": 5}}])", "tools", "must be a string"},
      {R"("tools": [{"type": "function", "function": {"description": "x"}}])", "tools", "name is missing"},
      {R"("tools": [)" + f + ", " + f + "]", "tools", "unique"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])", "tools",
       "parameters must be a JSON Schema object but is array"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])", "tools", "strict"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "extra": 1}}])", "tools", "extra"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}, "x": 1}])", "tools", "'x'"},
      {R"("tool_choice": "always")", "tool_choice", "\"always\""},
      {R"("tool_choice": 1)", "tool_choice", "number"},
      {R"("tool_choice": {"type": "function"})", "tool_choice", "function"},
      {R"("tool_choice": {"type": "function", "function": {}})", "tool_choice", "name is missing"},
      {R"("tool_choice": "required")", "tool_choice", "needs tools"},
      {R"("tools": [)" + f + R"(], "tool_choice": {"type": "function", "function": {"name": "g"}})",
       "tool_choice", "not among the tools (f)"},
      {R"("tools": [)" + f + R"(], "tool_choice": "required", "response_format": {"type": "json_object"})",
       "tool_choice", "response_format"},
      {R"("tools": [)" + f + R"(], "guided_regex": "a", "tool_choice": {"type": "function", "function": {"name": "f"}})",
       "tool_choice", "guided"},
      {R"("parallel_tool_calls": 1)", "parallel_tool_calls", "boolean"},
  };
  for (const auto& [fields, param, word] : bad) {
    const ApiError e = error_of("{" + kMsgs + ", " + fields + "}");
    EXPECT_EQ(e.status(), 400) << fields;
    EXPECT_EQ(e.param(), param) << fields << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << fields << ": " << e.what();
  }
  const std::string call = R"({"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}})";
  const std::vector<std::pair<std::string, std::string>> bad_msgs = {
      {R"({"role": "tool", "content": "x"})", "tool_call_id"},
      {R"({"role": "tool", "tool_call_id": 3, "content": "x"})", "tool_call_id must be a string"},
      {R"({"role": "tool", "tool_call_id": "1"})", "content is missing"},
      {R"({"role": "user", "content": "x", "tool_call_id": "1"})", "'tool_call_id'"},
      {R"({"role": "user", "content": "x", "tool_calls": [)" + call + "]}", "'tool_calls'"},
      {R"({"role": "assistant", "tool_calls": {}})", "must be a list"},
      {R"({"role": "assistant"})", "content is missing"},
      {R"({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]})",
       "id is missing"},
      {R"({"role": "assistant", "tool_calls": [{"id": "1", "type": "x", "function": {"name": "f", "arguments": "{}"}}]})",
       "type must be \"function\""},
      {R"({"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {}}}]})",
       "arguments must be a string but is object"},
      {R"({"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{nope"}}]})",
       "must be a JSON text"},
      {R"({"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"arguments": "{}"}}]})",
       "name is missing"},
      {R"({"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}", "x": 1}}]})",
       "'x'"},
  };
  for (const auto& [msg, word] : bad_msgs) {
    const ApiError e = error_of(R"({"messages": [{"role": "user", "content": "q"}, )" + msg + "]}");
    EXPECT_EQ(e.status(), 400) << msg;
    EXPECT_EQ(e.param(), "messages") << msg;
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << msg << ": " << e.what();
  }
}

TEST(ToolRequest, TokenizeTakesTools) {
  const TokenizeRequest t = parse_tokenize(
      "{" + kMsgs + ", " + kTools + R"(, "add_generation_prompt": true})");
  EXPECT_EQ(Json::parse(t.tools_json).size(), 2u);
  EXPECT_EQ(parse_tokenize("{" + kMsgs + "}").tools_json, "");
  try {
    parse_tokenize("{" + kMsgs + R"(, "tools": [{"type": "function"}]})");
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "tools");
  }
}

}  // namespace
}  // namespace kvattn::server
