// POST /v1/responses (OpenAI's Responses API, as vLLM serves it): the body is checked here
// and turned into the chat request it means, which the chat parser then checks like any other
// (request_parser.h), so sampling fields and their errors are the chat endpoint's.
//
// Fields:
//   input        a string (one user message) or a list of items: messages {"role": user |
//                assistant | system | developer, "content": string or parts, "type":
//                "message"?} with parts {"type": "input_text" | "output_text", "text"} (an
//                assistant turn's output_text sent back as history; "refusal" parts dropped);
//                {"type": "function_call", "call_id", "name", "arguments"} (consecutive ones:
//                one assistant turn's tool_calls) and {"type": "function_call_output",
//                "call_id", "output"} (a "tool" message). Other items (reasoning,
//                item_reference, images, files) are 400 unsupported.
//   tools        function tools {"type": "function", "name", "description"?, "parameters"?,
//                "strict"?}, tool_choice "auto" | "none" | "required" | {"type": "function",
//                "name"}, parallel_tool_calls: chat's tool calling (tool_request.h);
//                built-in tools (web_search, file_search, ...) are 400 unsupported;
//                max_tool_calls is checked (>= 1) and otherwise has no effect.
//   instructions a system message before the input (OpenAI's: it is not carried over).
//   max_output_tokens  the generated tokens' limit (>= 1), as chat's max_completion_tokens.
//   text.format  {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name",
//                "schema", "strict"?, "description"?}: chat's response_format.
//   temperature, top_p, stream, model, user, metadata, service_tier, and vLLM's sampling
//                extensions (top_k, min_p, seed, stop, repetition_penalty, ...): as in chat.
//   store        accepted; kvattn keeps no responses, so the response says "store": false and
//                previous_response_id (and GET /v1/responses/{id}) are unsupported.
//   truncation "disabled", background false, include [], reasoning null or without effort,
//   top_logprobs 0,
//   prompt_cache_key / safety_identifier (ignored), stream_options.include_obfuscation
//   (ignored: kvattn sends no obfuscation field).
// Chat-only fields (messages, n, max_tokens, response_format, logprobs, ...) are unknown here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/request_parser.h"

namespace kvattn::server {

struct ResponsesRequest {
  ParsedRequest chat;  // the chat request it means (endpoint kChat, n 1)
  // Echoed in the response object as sent (null when not given).
  nlohmann::ordered_json instructions;
  nlohmann::ordered_json max_output_tokens;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  nlohmann::ordered_json user;
  nlohmann::ordered_json text_format = {{"type", "text"}};
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as sent
  nlohmann::ordered_json tool_choice = "auto";
  bool parallel_tool_calls = true;
  double temperature = 1.0;
  double top_p = 1.0;
};

ResponsesRequest parse_responses_request(std::string_view body);

}  // namespace kvattn::server
