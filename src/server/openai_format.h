// OpenAI's response shapes: the whole response of a non-streamed request, the chunks of a
// streamed one (Server-Sent Events), and usage. Field names and objects follow the OpenAI API:
// "text_completion" / "chat.completion" / "chat.completion.chunk".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvattn/engine/llm.h"
#include "server/request_parser.h"
#include "server/request_stream.h"

namespace kvattn::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;     // "cmpl-..." or "chatcmpl-..."
  std::string model;  // the served model name
  int64_t created = 0;
};

struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;
  FinishReason finish_reason = FinishReason::kLength;
};

nlohmann::json usage_json(const Usage& u);
// with_token_ids: each choice also carries "token_ids" (vLLM's return_token_ids).
nlohmann::json full_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                             const Usage& u, bool with_token_ids);
// One streamed chunk for one choice: text (chat: the delta's content) and, on its last chunk,
// the finish reason. Chat streams open each choice with a role chunk (delta {"role":
// "assistant", "content": ""}). include_usage adds "usage": null, as OpenAI does on every
// chunk but the final usage chunk.
// token_ids: non-null adds "token_ids" to the choice.
nlohmann::json stream_chunk(const ResponseMeta& m, uint32_t choice, const std::string& text,
                            std::optional<FinishReason> finish, bool include_usage,
                            const std::vector<int32_t>* token_ids = nullptr);
nlohmann::json role_chunk(const ResponseMeta& m, uint32_t choice, bool include_usage);
// The last chunk with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const ResponseMeta& m, const Usage& u);

// "data: <json>\n\n". Serialising never throws: invalid UTF-8 is replaced by U+FFFD.
std::string sse(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
std::string dump(const nlohmann::json& j);

}  // namespace kvattn::server
