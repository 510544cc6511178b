// The channel between the engine thread and the HTTP handler that owns one request: the
// engine pushes events, the handler pops them (blocking, with a timeout so it can check its
// connection). A request's events arrive in this order: kAccepted or kError first; then
// kToken / kChoiceEnd events; then exactly one kDone or kError. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"
#include "server/api_error.h"

namespace kvattn::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache
};

struct StreamEvent {
  // kPromptLogprobs: a prompt's token log-probabilities (echo with logprobs), once per prompt
  // after its choices ended; `choice` is the prompt's first choice.
  enum class Kind { kAccepted, kToken, kChoiceEnd, kPromptLogprobs, kDone, kError };
  Kind kind = Kind::kToken;
  uint32_t choice = 0;  // kToken, kChoiceEnd: the OpenAI choice index
  std::string text;     // kToken (may be empty: held back)
  int32_t token = -1;   // kToken: the generated id
  std::optional<TokenLogprobs> logprobs;  // kToken: the id's, when the request asked
  std::vector<TokenLogprobs> prompt_logprobs;  // kPromptLogprobs: RequestOutput's
  FinishReason finish_reason = FinishReason::kLength;  // kChoiceEnd
  Usage usage;                                         // kDone
  std::optional<ApiError> error;                       // kError
};

class RequestStream {
 public:
  void push(StreamEvent e);
  // Moves every queued event into `out` (appending). Waits up to `timeout` when none is
  // queued; false when it timed out empty.
  bool pop_all(std::vector<StreamEvent>& out, std::chrono::milliseconds timeout);
  // Waits until an event is queued; returns every queued one.
  std::vector<StreamEvent> wait_all();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
};

}  // namespace kvattn::server
