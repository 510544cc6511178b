// Parses the body of POST /v1/completions and /v1/chat/completions (untrusted JSON) into a
// ParsedRequest, or throws ApiError (400) naming the bad field. It never touches the model:
// prompts stay text, messages or token ids here (prompt_builder.h tokenizes them).
//
// Accepted fields (OpenAI's names; null means "not given"):
//   both:        model, max_tokens, temperature [0, 2], top_p (0, 1], top_k (-1 or 0: off),
//                min_p [0, 1], seed (integer), stop (string or list of up to 16), n [1, 128],
//                stream, stream_options.include_usage (continuous_usage_stats: false only),
//                user, service_tier, store, metadata (no effect here), priority (0 only), and vLLM's
//                extensions ignore_eos, skip_special_tokens and return_token_ids (each choice,
//                or chunk, also carries the generated ids as "token_ids");
//                presence_penalty / frequency_penalty [-2, 2], vLLM's repetition_penalty
//                (0, 100], logit_bias {"<token id>": [-100, 100]} (at most 1024), vLLM's
//                include_stop_str_in_output (the text ends after the matched stop string),
//                stop_token_ids (up to 16 ids: generation ends at them, as at the model's
//                end tokens, and they are left out of the text), vLLM's min_tokens (the end
//                and stop ids are held back until then; <= max_tokens), vLLM's
//                allowed_token_ids (a non-empty list: only these ids are drawn), bad_words
//                (up to 64 strings: never generated, as vLLM tokenizes and bans them) and
//                truncate_prompt_tokens (k >= 1: each prompt keeps its last k tokens; -1:
//                its last context-length tokens, as vLLM's; usage counts what was kept);
//   completions: prompt (string, list of strings, token ids, or list of token-id lists),
//                echo (each choice's text and logprobs start with its prompt's; with
//                logprobs, the prompt tokens' log-probabilities, SamplingParams::
//                prompt_logprobs; not with stream: true), best_of (== n), suffix (null),
//                logprobs [0, 20] (the legacy API's count of alternatives; OpenAI allows 5,
//                vLLM 20);
//   chat:        messages (system / developer / user / assistant / tool; content a string or a list
//                of {"type": "text", "text": ...} parts, joined by newlines as vLLM does; a
//                response's fields sent back as history are taken where empty or null, and
//                refusal / reasoning_content / annotations ignored), max_completion_tokens
//                (wins over max_tokens, as in vLLM), tools, tool_choice and
//                parallel_tool_calls (tool_request.h; messages may then hold assistant
//                tool_calls and "tool" results with tool_call_id), modalities (["text"] only),
//                logprobs (bool), top_logprobs [0, 20] (needs logprobs: true),
//                and vLLM's add_generation_prompt,
//                continue_final_message (the last message is left open for the model to go
//                on with, as HF's apply_chat_template does; not with add_generation_prompt:
//                true) and chat_template_kwargs ({"enable_thinking": bool} only: Qwen3's
//                switch);
//   both, vLLM's: request_id (a string of at most 256 bytes: the response's id is
//                "cmpl-" / "chatcmpl-" and it).
//   both:        structured output: response_format, vLLM's guided_json / guided_regex /
//                guided_choice and structured_outputs (structured_fields.h).
// Log-probabilities (SamplingParams::logprobs) are the raw model's, before temperature and
// the top-k / top-p / min-p filters (vLLM's default).
// Integer fields also take numbers with an integral value (5.0), as vLLM's do.
// Defaults are OpenAI's: temperature 1, max_tokens 16 (completions) or up to the context (chat);
// completions take max_tokens 0 with echo (the prompt scored, nothing generated).
// Any other field is an error ("unknown parameter"), so a typo never silently changes nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvattn/engine/chat_template.h"
#include "kvattn/engine/sampler.h"
#include "server/tool_request.h"

namespace kvattn::server {

enum class Endpoint { kCompletions, kChat };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty when not given
  // Completions: one entry per prompt, either all text or all token ids.
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> id_prompts;
  std::vector<ChatMessage> messages;  // chat
  SamplingParams params;              // max_tokens holds the request's value when given
  bool max_tokens_given = false;
  const char* max_tokens_field = "max_tokens";  // the field that set it (errors name it)
  bool seed_given = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool return_token_ids = false;
  bool echo = false;  // completions: the prompt leads each choice (prompt_logprobs with logprobs)
  // vLLM's truncate_prompt_tokens: each prompt keeps its last k tokens (-1: the context's
  // length); none: prompts are taken whole.
  std::optional<int64_t> truncate_prompt_tokens;
  std::vector<std::string> bad_words;  // vLLM's; prompt_builder tokenizes them
  // Chat, vLLM's: add_generation_prompt (default true) and chat_template_kwargs.enable_thinking.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<bool> enable_thinking;
  std::string request_id;  // vLLM's; empty: a random id
  ToolRequest tools;       // chat's tools, tool_choice, parallel_tool_calls
};

// Limits on untrusted bodies (beyond them: 400).
inline constexpr int kMaxJsonDepth = 32;
inline constexpr size_t kMaxPrompts = 64;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxAllowedTokenIds = size_t{1} << 20;
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxBadWords = 64;

ParsedRequest parse_request(std::string_view body, Endpoint endpoint);
// An untrusted body as a JSON object (400 invalid_json otherwise, and past kMaxJsonDepth).
nlohmann::ordered_json parse_body_object(std::string_view body);

// vLLM's POST /tokenize: {"prompt": text} or {"messages": [...]} (the chat template applied,
// add_generation_prompt default true; chat_template_kwargs and tools as in chat), add_special_tokens
// (default true: the model's BOS where
// its tokenizer adds one, as the completion endpoints encode; vLLM's chat default is false,
// its chat path encodes without it), model. POST /detokenize: {"tokens": [ids]}, model. Same
// limits and errors as parse_request.
struct TokenizeRequest {
  std::string model;
  std::string prompt;
  std::vector<ChatMessage> messages;  // never empty when given
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
  std::string tools_json;  // vLLM's "tools" (as chat's; rendered by templates with a tool format)
  bool chat() const { return !messages.empty(); }  // messages given (else prompt)
};
TokenizeRequest parse_tokenize(std::string_view body);
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize(std::string_view body);

}  // namespace kvattn::server
