// Generated text -> OpenAI tool calls, for one choice, whole or streamed. The formats:
//   kHermes (Qwen2.5 / Qwen3): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
//     any number; the last may lack its closing tag (the generation ended). A block whose JSON
//     is not such an object, or names a function that is not among the tools, stays content as
//     written. Each call is final at its closing tag (streamed then).
//   kLlama3Json (Llama 3.1+): the whole output (after whitespace, an optional <|python_tag|>)
//     is {"name": ..., "parameters" | "arguments": {...}} objects separated by ';'. All or
//     nothing: any malformed part and the whole text is content (vLLM). Calls are known at the end.
//   kMistral: text, then [TOOL_CALLS] and a JSON list of {"name", "arguments"} objects; the text
//     before the marker is content. All or nothing after the marker; calls known at the end.
//   kRequired (tool_choice "required"): the output is a JSON list of {"name", "parameters"}.
//   kNamed (a named function): the output is the function's arguments object.
// Content is the text outside the calls, less whitespace that only separates calls from the
// text around them (a whitespace-only content with calls is none). Streaming returns exactly
// what the whole text gives, split at any byte: content is held back while it may be the
// start of a marker, and (kLlama3Json) while the output may be a call.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kvattn::server {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ParsedToolCall&) const = default;
};

enum class ToolFormat { kHermes, kLlama3Json, kMistral, kRequired, kNamed };

class ToolCallParser {
 public:
  // tools: the functions' names (calls to others are not calls); named: kNamed's function.
  ToolCallParser(ToolFormat format, std::set<std::string> tools, std::string named = {});

  // The next piece of text: returns the content that can be sent now and appends the calls
  // completed by it.
  std::string feed(std::string_view text, std::vector<ParsedToolCall>& calls);
  // The end of the choice: the rest of the content and the last calls.
  std::string finish(std::vector<ParsedToolCall>& calls);
  int64_t num_calls() const { return num_calls_; }

 private:
  enum class State { kText, kCall, kUndecided };
  std::string text(std::string_view s);  // content, with the whitespace rule
  void call(ParsedToolCall c, std::vector<ParsedToolCall>& calls);
  std::string feed_hermes(std::vector<ParsedToolCall>& calls);
  std::string feed_mistral();
  std::string feed_llama();
  std::string finish_held(std::vector<ParsedToolCall>& calls);

  ToolFormat format_;
  std::set<std::string> tools_;
  std::string named_;
  State state_;
  std::string buf_;        // text not yet decided
  std::string held_ws_;    // trailing whitespace of the content, held back
  std::string block_ws_;   // kHermes: the whitespace before the open block
  bool after_call_ = false;  // whitespace after a call is dropped
  int64_t num_calls_ = 0;
};

// Parses `text` whole (feed + finish).
std::string parse_tool_calls(ToolCallParser& p, std::string_view text,
                             std::vector<ParsedToolCall>& calls);

}  // namespace kvattn::server
