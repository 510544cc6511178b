// Tool calling on the response side, per request: which parser reads each choice's text
// (tool_parsers.h), the calls' ids and the finish reason. See docs/notes/serve.md, "Tool calling".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"
#include "server/openai_format.h"
#include "server/request_parser.h"
#include "server/tool_parsers.h"

namespace kvattn::server {

struct ToolOutput {
  ToolFormat format = ToolFormat::kHermes;
  std::set<std::string> names;  // the tools' functions
  std::string named;            // tool_choice's function
  bool mistral_ids = false;     // 9 alphanumerics (Mistral's templates check the length)
  bool named_choice = false;    // finish_reason "stop" with calls, as OpenAI and vLLM send it
  bool single = false;          // parallel_tool_calls false: the first call only

  ToolCallParser parser() const { return ToolCallParser(format, names, named); }
  // The choice's finish reason: "tool_calls" when it produced calls (named: "stop").
  std::string finish_reason(FinishReason r, bool any_calls) const;
  // Ids for the parsed calls, given random bits; drops calls past the first when `single` and
  // `already` calls were sent.
  std::vector<ToolCallOut> to_calls(std::vector<ParsedToolCall> parsed, size_t already,
                                    const std::function<uint64_t()>& random) const;
};

// Null when the output is plain text (no tools, or tool_choice "none").
std::optional<ToolOutput> tool_output(const ParsedRequest& r, const LLM& llm);

}  // namespace kvattn::server
