// The Responses API's shapes (POST /v1/responses): the response object, its one output
// message, and the Server-Sent Events of a streamed response:
//   response.created, response.in_progress, response.output_item.added,
//   response.content_part.added, response.output_text.delta (per token text),
//   response.output_text.done, response.content_part.done, response.output_item.done, then
//   response.completed (or response.incomplete after max_output_tokens, with
//   incomplete_details.reason "max_output_tokens"), or response.failed on an engine error.
// Every event carries "type" and an increasing "sequence_number"; its SSE frame names the type
// in an "event:" line, as OpenAI's do.
#pragma once

#include <cstdint>
#include <string>

#include "kvattn/engine/llm.h"
#include "server/openai_format.h"
#include "server/request_stream.h"
#include "server/responses_request.h"

namespace kvattn::server {

struct ResponsesMeta {
  std::string id;          // "resp_..."
  std::string message_id;  // "msg_..."
  std::string model;
  int64_t created = 0;
  const ResponsesRequest* request = nullptr;
};

// The output message; `text` null: no content part yet (in progress).
ResponseJson output_message(const ResponsesMeta& m, const char* status, const std::string* text);
ResponseJson output_text_part(const std::string& text);

// The response object: status "in_progress" (output and usage empty), "completed",
// "incomplete" (finish kLength) or "failed" (error set).
ResponseJson response_object(const ResponsesMeta& m, const std::string& status,
                             const ResponseJson& output, const Usage* usage,
                             const ApiError* error = nullptr);

// The finished response for a text and the way it ended.
ResponseJson finished_response(const ResponsesMeta& m, const std::string& text,
                               FinishReason finish, const Usage& usage);

// Numbers a streamed response's events and frames them.
class ResponsesEvents {
 public:
  // "event: <type>\ndata: <json>\n\n"; `event` gets its type and sequence number first.
  std::string frame(const std::string& type, ResponseJson event);

 private:
  int64_t next_ = 0;
};

}  // namespace kvattn::server
