#include "server/responses_stream.h"

#include <utility>

namespace kvattn::server {

ResponsesItems::ResponsesItems(const ResponsesMeta& meta, ResponsesEvents& events,
                               std::function<std::string(const char*)> new_id)
    : meta_(meta), events_(events), new_id_(std::move(new_id)) {}

ResponseJson ResponsesItems::at_part() const {
  return {{"item_id", *message_id_}, {"output_index", message_index_}, {"content_index", 0}};
}

std::string ResponsesItems::open_message() {
  message_id_ = new_id_("msg_");
  message_index_ = next_index_++;
  message_text_.clear();
  std::string out = events_.frame(
      "response.output_item.added",
      {{"output_index", message_index_}, {"item", message_item(*message_id_, "in_progress",
                                                               nullptr)}});
  ResponseJson part = at_part();
  part["part"] = output_text_part("");
  out += events_.frame("response.content_part.added", std::move(part));
  return out;
}

std::string ResponsesItems::close_message(const char* status) {
  ResponseJson text_done = at_part();
  text_done["text"] = message_text_;
  text_done["logprobs"] = ResponseJson::array();
  std::string out = events_.frame("response.output_text.done", std::move(text_done));
  ResponseJson part_done = at_part();
  part_done["part"] = output_text_part(message_text_);
  out += events_.frame("response.content_part.done", std::move(part_done));
  ResponseJson item = message_item(*message_id_, status, &message_text_);
  out += events_.frame("response.output_item.done",
                       {{"output_index", message_index_}, {"item", item}});
  output_.push_back(std::move(item));
  message_id_.reset();
  return out;
}

std::string ResponsesItems::text(const std::string& piece) {
  if (piece.empty()) return {};
  std::string out = message_id_ ? std::string() : open_message();
  message_text_ += piece;
  ResponseJson delta = at_part();
  delta["delta"] = piece;
  delta["logprobs"] = ResponseJson::array();
  out += events_.frame("response.output_text.delta", std::move(delta));
  return out;
}

std::string ResponsesItems::call(const ToolCallOut& call) {
  std::string out = message_id_ ? close_message("completed") : std::string();
  const std::string id = new_id_("fc_");
  const int64_t index = next_index_++;
  ToolCallOut started = call;
  started.arguments.clear();
  out += events_.frame("response.output_item.added",
                       {{"output_index", index},
                        {"item", function_call_item(id, started, "in_progress")}});
  out += events_.frame("response.function_call_arguments.delta",
                       {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}});
  out += events_.frame("response.function_call_arguments.done",
                       {{"item_id", id}, {"output_index", index}, {"name", call.name},
                        {"arguments", call.arguments}});
  ResponseJson item = function_call_item(id, call, "completed");
  out += events_.frame("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  return out;
}

std::string ResponsesItems::finish(FinishReason finish, const Usage& usage) {
  std::string out;
  if (!message_id_ && output_.empty()) out += open_message();
  if (message_id_) out += close_message(finished_status(finish));
  const char* type = finish == FinishReason::kLength ? "response.incomplete"
                                                     : "response.completed";
  response_ = finished_response(meta_, output_, finish, usage);
  out += events_.frame(type, {{"response", response_}});
  return out;
}

}  // namespace kvattn::server
