// The output items of one Responses API request as they form, and the events that tell a
// streaming client about them (responses_format.h frames them):
//   text        opens a message item at its first piece (response.output_item.added,
//               response.content_part.added), then response.output_text.delta per piece;
//   call        closes an open message (response.output_text.done, response.content_part.done,
//               response.output_item.done), then the function_call item whole:
//               response.output_item.added, response.function_call_arguments.delta (the
//               arguments in one piece), response.function_call_arguments.done,
//               response.output_item.done;
//   finish      closes an open message (an output with no item gets an empty message), then
//               response.completed or response.incomplete with every item.
// Items take output indices in the order they open; the finished output lists them so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "server/responses_format.h"

namespace kvattn::server {

class ResponsesItems {
 public:
  // new_id(prefix): a fresh id ("msg_", "fc_").
  ResponsesItems(const ResponsesMeta& meta, ResponsesEvents& events,
                 std::function<std::string(const char*)> new_id);

  // Each returns the events' frames.
  std::string text(const std::string& piece);
  std::string call(const ToolCallOut& call);
  std::string finish(FinishReason finish, const Usage& usage);

  const ResponseJson& output() const { return output_; }  // the closed items
  const ResponseJson& response() const { return response_; }  // after finish(): the whole

 private:
  std::string open_message();
  std::string close_message(const char* status);
  ResponseJson at_part() const;

  const ResponsesMeta& meta_;
  ResponsesEvents& events_;
  std::function<std::string(const char*)> new_id_;
  ResponseJson output_ = ResponseJson::array();
  int64_t next_index_ = 0;
  std::optional<std::string> message_id_;  // the open message's
  int64_t message_index_ = 0;
  std::string message_text_;
  ResponseJson response_;
};

}  // namespace kvattn::server
