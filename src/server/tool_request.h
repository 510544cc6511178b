// Chat's function tools on the request side (OpenAI's tools / tool_choice / parallel_tool_calls
// and the history's tool_calls), parsed from untrusted JSON into a ToolRequest, or ApiError
// (400) naming the field with what was expected and what came. tool_constraint() turns
// tool_choice "required" / a named function into the structured output that forces the call,
// as vLLM does (docs/notes/serve.md, "Tool calling").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvattn/engine/chat_template.h"
#include "kvattn/engine/sampler.h"

namespace kvattn::server {

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // the JSON Schema; null when the tool gives none
};

struct ToolRequest {
  // kNone: the output is text (no tools, or tool_choice "none"); kAuto: the model may call,
  // the family's parser finds the calls; kRequired / kNamed: the output is constrained to calls.
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  std::string tools_json;  // the "tools" list as sent (ordered), for the chat template; "" = none
  std::vector<ToolSpec> tools;
  Choice choice = Choice::kNone;
  bool choice_given = false;
  std::string named;     // kNamed: the function
  bool parallel = true;  // parallel_tool_calls; false: at most one call
};

inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolCalls = 128;  // per assistant message

// The request fields (null values never reach these: null is "not given").
void parse_tools(const nlohmann::ordered_json& v, ToolRequest& out);
void parse_tool_choice(const nlohmann::ordered_json& v, ToolRequest& out);
// After every field: defaults (auto with tools, none without) and the checks across fields
// (a named function among the tools; no tool_choice without tools; required / named not with
// another structured output).
void finish_tool_request(ToolRequest& t, const StructuredOutput& structured);

// An assistant message's "tool_calls" (at = "messages[i]"): {id, type "function", function
// {name, arguments (a JSON text)}} each.
std::vector<ChatToolCall> parse_message_tool_calls(const nlohmann::ordered_json& v,
                                                   const std::string& at);

// kRequired: a JSON array of 1.. (parallel) or exactly 1 {"name": <a tool's name>,
// "parameters": <its schema>}; kNamed: the function's arguments object. kJsonSchema either way.
StructuredOutput tool_constraint(const ToolRequest& t);

}  // namespace kvattn::server
