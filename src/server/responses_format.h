// The Responses API's shapes (POST /v1/responses): the response object and its output items
// (messages and function calls), and the framing of a streamed response's Server-Sent Events
// (responses_stream.h writes them). Every event carries "type" and an increasing
// "sequence_number"; its SSE frame names the type in an "event:" line, as OpenAI's do.
#pragma once

#include <cstdint>
#include <string>

#include "kvattn/engine/llm.h"
#include "server/openai_format.h"
#include "server/request_stream.h"
#include "server/responses_request.h"

namespace kvattn::server {

struct ResponsesMeta {
  std::string id;  // "resp_..."
  std::string model;
  int64_t created = 0;
  const ResponsesRequest* request = nullptr;
};

ResponseJson output_text_part(const std::string& text);
// An output message; `text` null: no content part yet (in progress).
ResponseJson message_item(const std::string& id, const char* status, const std::string* text);
// A function call the model made ("fc_..." id; call_id is the call's id).
ResponseJson function_call_item(const std::string& id, const ToolCallOut& call,
                                const char* status);

// The response object: status "in_progress" (output and usage empty), "completed",
// "incomplete" (finish kLength) or "failed" (error set).
ResponseJson response_object(const ResponsesMeta& m, const std::string& status,
                             const ResponseJson& output, const Usage* usage,
                             const ApiError* error = nullptr);

// The finished response: its output items and the way the text ended.
ResponseJson finished_response(const ResponsesMeta& m, const ResponseJson& output,
                               FinishReason finish, const Usage& usage);
const char* finished_status(FinishReason finish);  // "completed" | "incomplete"

// Numbers a streamed response's events and frames them.
class ResponsesEvents {
 public:
  // "event: <type>\ndata: <json>\n\n"; `event` gets its type and sequence number first.
  std::string frame(const std::string& type, ResponseJson event);

 private:
  int64_t next_ = 0;
};

}  // namespace kvattn::server
