// The tool-calling half of the chat templates (chat_template.h): tools, assistant tool calls and
// tool results rendered as the families' published Jinja sources render them under HF's
// apply_chat_template(tools=...). Internal to the tokenizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvattn/engine/chat_template.h"

namespace kvattn::chat_detail {

// HF's `tojson` filter: Python's json.dumps(x, ensure_ascii=False) with the object key order
// kept; indent < 0: one line with ", " and ": " separators; indent >= 0: that many spaces per
// level, "," at line ends. Floats print as Python's repr (1500.0, 1e-05, 1e+22).
std::string py_json(const nlohmann::ordered_json& j, int indent = -1);

// True when the conversation needs the tool branches: tools given, a call or a tool result.
bool uses_tools(const std::vector<ChatMessage>& messages, std::string_view tools_json);

// t.tools != kNone. Throws kvattn::Error with the template's message where it raises, and for
// tools_json or call arguments that are not JSON (the server checks both before).
std::string render_with_tools(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, std::optional<bool> enable_thinking,
                              std::string_view tools_json);

// chat_template.cpp's helpers: Python's str.strip(), the Llama 3.1+ system turn's date, and
// Gemma's / Mistral's role alternation over `msgs` (user first), raising with `what` before
// the template's message.
std::string_view py_strip(std::string_view s);
std::string llama3_date(const ChatTemplate& t);
void check_alternation(const std::vector<const ChatMessage*>& msgs, const char* what);

}  // namespace kvattn::chat_detail
