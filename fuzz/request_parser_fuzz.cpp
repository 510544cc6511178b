// The server's request parsers on arbitrary bytes (first byte: 0 completions, 2 /tokenize,
// 3 /detokenize, else chat): each returns its request or throws ApiError (400, non-empty
// message); nothing else escapes. A parsed request must satisfy the limits the parser promises.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "server/api_error.h"
#include "server/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvattn::server;
  if (size == 0) return 0;
  const Endpoint endpoint = data[0] == 0 ? Endpoint::kCompletions : Endpoint::kChat;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 2) {
      const TokenizeRequest t = parse_tokenize(body);
      FUZZ_ASSERT(t.messages.size() <= kMaxMessages);
      return 0;
    }
    if (data[0] == 3) {
      for (int32_t id : parse_detokenize(body).tokens) FUZZ_ASSERT(id >= 0);
      return 0;
    }
    const ParsedRequest r = parse_request(body, endpoint);
    FUZZ_ASSERT(r.params.prompt_logprobs <= r.params.logprobs);
    FUZZ_ASSERT(r.params.prompt_logprobs < 0 || r.echo);
    for (int32_t id : r.params.stop_token_ids) FUZZ_ASSERT(id >= 0);
    FUZZ_ASSERT(r.params.min_tokens >= 0);
    FUZZ_ASSERT(r.params.n >= 1 && r.params.n <= 128);
    FUZZ_ASSERT(r.params.max_tokens >= 0);
    FUZZ_ASSERT(r.params.temperature >= 0.0f && r.params.temperature <= 2.0f);
    FUZZ_ASSERT(r.params.top_p > 0.0f && r.params.top_p <= 1.0f);
    FUZZ_ASSERT(r.params.stop.size() <= kMaxStops);
    if (endpoint == Endpoint::kChat) {
      FUZZ_ASSERT(!r.messages.empty() && r.messages.size() <= kMaxMessages);
    } else {
      FUZZ_ASSERT(r.text_prompts.empty() != r.id_prompts.empty());
      for (const auto& p : r.id_prompts) {
        FUZZ_ASSERT(!p.empty());
        for (int32_t id : p) FUZZ_ASSERT(id >= 0);
      }
    }
    (void)ApiError(400, "x").to_json().dump();
  } catch (const ApiError& e) {
    FUZZ_ASSERT(e.status() == 400);
    FUZZ_ASSERT(e.what()[0] != '\0');
    // The error body must serialise even when the message quotes invalid UTF-8.
    (void)e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
