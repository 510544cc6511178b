#include "server/responses_format.h"

#include <utility>

namespace kvattn::server {

ResponseJson output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", ResponseJson::array()},
          {"logprobs", ResponseJson::array()}};
}

ResponseJson message_item(const std::string& id, const char* status, const std::string* text) {
  ResponseJson content = ResponseJson::array();
  if (text != nullptr) content.push_back(output_text_part(*text));
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"},
          {"content", std::move(content)}};
}

ResponseJson function_call_item(const std::string& id, const ToolCallOut& call,
                                const char* status) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", call.arguments},
          {"call_id", call.id}, {"name", call.name}};
}

ResponseJson response_object(const ResponsesMeta& m, const std::string& status,
                             const ResponseJson& output, const Usage* usage,
                             const ApiError* error) {
  const ResponsesRequest& r = *m.request;
  ResponseJson j;
  j["id"] = m.id;
  j["object"] = "response";
  j["created_at"] = m.created;
  j["status"] = status;
  j["background"] = false;
  j["error"] = nullptr;
  if (error != nullptr) j["error"] = {{"code", error->code().empty() ? "server_error" : error->code()},
                                      {"message", error->what()}};
  j["incomplete_details"] = nullptr;
  if (status == "incomplete") j["incomplete_details"] = {{"reason", "max_output_tokens"}};
  j["instructions"] = r.instructions;
  j["max_output_tokens"] = r.max_output_tokens;
  j["max_tool_calls"] = nullptr;
  j["model"] = m.model;
  j["output"] = output;
  j["parallel_tool_calls"] = r.parallel_tool_calls;
  j["previous_response_id"] = nullptr;
  j["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  j["service_tier"] = "default";
  j["store"] = false;  // kvattn keeps no responses
  j["temperature"] = r.temperature;
  j["text"] = {{"format", r.text_format}};
  j["tool_choice"] = r.tool_choice;
  j["tools"] = r.tools;
  j["top_logprobs"] = 0;
  j["top_p"] = r.top_p;
  j["truncation"] = "disabled";
  j["usage"] = nullptr;
  if (usage != nullptr) {
    j["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", usage->cached_tokens}}},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  j["user"] = r.user;
  j["metadata"] = r.metadata;
  return j;
}

const char* finished_status(FinishReason finish) {
  return finish == FinishReason::kLength ? "incomplete" : "completed";
}

ResponseJson finished_response(const ResponsesMeta& m, const ResponseJson& output,
                               FinishReason finish, const Usage& usage) {
  return response_object(m, finished_status(finish), output, &usage);
}

std::string ResponsesEvents::frame(const std::string& type, ResponseJson event) {
  ResponseJson j = {{"type", type}, {"sequence_number", next_++}};
  for (auto& [key, value] : event.items()) j[key] = std::move(value);
  return "event: " + type + "\ndata: " + dump(j) + "\n\n";
}

}  // namespace kvattn::server
