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

// Response bodies keep their keys in the order written (OpenAI's field order; completions'
// top_logprobs dicts most likely first), unlike nlohmann::json's sorted objects.
using ResponseJson = nlohmann::ordered_json;

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;     // "cmpl-..." or "chatcmpl-..."
  std::string model;  // the served model name
  int64_t created = 0;
};

// One call of an assistant message (OpenAI's tool_calls[i]).
struct ToolCallOut {
  std::string id;  // "chatcmpl-tool-<32 hex>" (vLLM's), or 9 alphanumerics for Mistral
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ChoiceResult {
  std::string text;  // with tool calling: the content (the text less the calls)
  // Tool calling (chat): the calls found; with calls and no text the content is null.
  std::vector<ToolCallOut> tool_calls;
  std::optional<std::string> finish_name;  // set: the finish_reason sent ("tool_calls")
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per token id when the request asked
  FinishReason finish_reason = FinishReason::kLength;
  // Completions' echo (prompt_ids given: prompts are never empty): the prompt leads the
  // choice's text and, with logprobs, its tokens lead the logprobs (prompt_logprobs[j] is
  // token j + 1's; the first token's is null).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  std::vector<TokenLogprobs> prompt_logprobs;
  bool echoed() const { return !prompt_ids.empty(); }
};

// Log-probabilities in OpenAI's two shapes. A token's string is its bytes (Tokenizer::
// token_bytes; "token_id:N", vLLM's form, without a tokenizer); -inf is sent as -9999.0, as
// OpenAI and vLLM do (JSON has no infinity).
struct LogprobsFormat {
  const Tokenizer* tokenizer = nullptr;
  std::string token(int32_t id) const;
};
// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}.
ResponseJson chat_logprobs(const LogprobsFormat& f, const std::vector<int32_t>& ids,
                             const std::vector<TokenLogprobs>& lps);
// Completions: {"tokens", "token_logprobs", "top_logprobs" (dicts: the alternatives, most
// likely first, and the chosen token), "text_offset"}; `offset` is the first token's offset in
// the choice's text, in characters (code points, as vLLM's Python len(); an ill-formed byte
// run counts as the one U+FFFD it is sent as), and advances past the tokens (streams carry it
// from chunk to chunk).
ResponseJson completion_logprobs(const LogprobsFormat& f, const std::vector<int32_t>& ids,
                                   const std::vector<TokenLogprobs>& lps, int64_t& offset);
// The same shape for an echoed choice: the prompt's tokens first (the first one's logprob
// and top_logprobs null, as OpenAI and vLLM send it), then the generated ones.
ResponseJson echo_completion_logprobs(const LogprobsFormat& f, const ChoiceResult& c);

ResponseJson usage_json(const Usage& u);
// with_token_ids: each choice also carries "token_ids" (vLLM's return_token_ids).
// logprobs: non-null when the request asked for log-probabilities (choices carry them).
ResponseJson full_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                             const Usage& u, bool with_token_ids,
                             const LogprobsFormat* logprobs = nullptr);
// One streamed chunk for one choice: text (chat: the delta's content) and, on its last chunk,
// the finish reason. Chat streams open each choice with a role chunk (delta {"role":
// "assistant", "content": ""}). include_usage adds "usage": null, as OpenAI does on every
// chunk but the final usage chunk.
// token_ids: non-null adds "token_ids" to the choice; logprobs: non-null is the choice's
// "logprobs" (chat_logprobs / completion_logprobs of the chunk's tokens).
ResponseJson stream_chunk(const ResponseMeta& m, uint32_t choice, const std::string& text,
                            std::optional<FinishReason> finish, bool include_usage,
                            const std::vector<int32_t>* token_ids = nullptr,
                            const ResponseJson* logprobs = nullptr);
ResponseJson role_chunk(const ResponseMeta& m, uint32_t choice, bool include_usage);
// Chat: one completed call as a delta {"tool_calls": [{"index", "id", "type": "function",
// "function": {"name", "arguments"}}]}; `index` counts the choice's calls.
ResponseJson tool_call_chunk(const ResponseMeta& m, uint32_t choice, size_t index,
                             const ToolCallOut& call, bool include_usage);
// A choice's last chunk with a finish reason named by the caller ("tool_calls").
ResponseJson finish_chunk(const ResponseMeta& m, uint32_t choice, const std::string& reason,
                          bool include_usage);
// The last chunk with stream_options.include_usage: no choices, the usage.
ResponseJson usage_chunk(const ResponseMeta& m, const Usage& u);

// "data: <json>\n\n". Serialising never throws: invalid UTF-8 is replaced by U+FFFD.
std::string sse(const ResponseJson& j);
std::string sse(const nlohmann::json& j);  // error bodies (ApiError::to_json)
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
std::string dump(const ResponseJson& j);
std::string dump(const nlohmann::json& j);

}  // namespace kvattn::server
