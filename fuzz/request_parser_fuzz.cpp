// The server's request parsers on arbitrary bytes (first byte: 0 completions, 2 /tokenize,
// 3 /detokenize, 4 the tool-call parsers, 5 /v1/responses, else chat): each returns its
// request or throws ApiError (400, non-empty message); nothing else escapes. A parsed request
// must satisfy the limits the parser promises. The tool-call parsers (byte 4, then the format
// and a split point) must give the same content and calls streamed in two pieces as whole.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "server/api_error.h"
#include "server/request_parser.h"
#include "server/responses_request.h"
#include "server/tool_parsers.h"

namespace {

void check_tool_parser(const uint8_t* data, size_t size) {
  using namespace kvattn::server;
  if (size < 2) return;
  const auto format = static_cast<ToolFormat>(data[0] % 5);
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t split = text.empty() ? 0 : data[1] % (text.size() + 1);
  const std::set<std::string> tools = {"f", "get_weather"};
  ToolCallParser whole(format, tools, "f"), streamed(format, tools, "f");
  std::vector<ParsedToolCall> a, b;
  const std::string content = parse_tool_calls(whole, text, a);
  std::string pieces = streamed.feed(text.substr(0, split), b);
  pieces += streamed.feed(text.substr(split), b);
  pieces += streamed.finish(b);
  FUZZ_ASSERT(content == pieces);
  FUZZ_ASSERT(a == b);
  FUZZ_ASSERT(content.size() <= text.size());
  for (const ParsedToolCall& c : a) {
    FUZZ_ASSERT(format == ToolFormat::kNamed ? c.name == "f" : tools.count(c.name) == 1);
    FUZZ_ASSERT(nlohmann::json::parse(c.arguments, nullptr, false).is_object());
  }
}

// /v1/responses: one chat request of one choice, its limits those of chat.
void check_responses(std::string_view body) {
  using namespace kvattn::server;
  const ResponsesRequest r = parse_responses_request(body);
  FUZZ_ASSERT(!r.chat.messages.empty() && r.chat.messages.size() <= kMaxMessages);
  FUZZ_ASSERT(r.chat.params.n == 1 && r.chat.endpoint == Endpoint::kChat);
  FUZZ_ASSERT(r.max_output_tokens.is_null() || r.chat.params.max_tokens >= 1);
  (void)r.metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

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
    if (data[0] == 4) {
      check_tool_parser(data + 1, size - 1);
      return 0;
    }
    if (data[0] == 5) {
      check_responses(body);
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
      using Choice = ToolRequest::Choice;
      FUZZ_ASSERT(r.tools.choice == Choice::kNone || !r.tools.tools.empty());
      FUZZ_ASSERT(r.tools.tools.empty() == r.tools.tools_json.empty());
      const bool forced = r.tools.choice == Choice::kRequired || r.tools.choice == Choice::kNamed;
      if (forced) {
        FUZZ_ASSERT(r.params.structured.kind == kvattn::StructuredOutput::Kind::kJsonSchema);
        FUZZ_ASSERT(nlohmann::json::parse(r.params.structured.spec, nullptr, false).is_object());
      }
      for (const auto& m : r.messages) {
        for (const auto& c : m.tool_calls) FUZZ_ASSERT(nlohmann::json::accept(c.arguments));
      }
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
