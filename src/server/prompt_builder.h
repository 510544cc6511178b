// Turns a ParsedRequest into what the engine takes: token-id prompts (chat template applied,
// text encoded as `kvattn generate` encodes it) and the final SamplingParams. Checks what needs
// the model: a tokenizer for text, a chat template for messages, ids inside the vocabulary,
// and prompt plus max_tokens inside the context (400, code context_length_exceeded).
// Thread-safe: it only reads the LLM's tokenizer and config, which never change.
#pragma once

#include <cstdint>
#include <vector>

#include "kvattn/engine/llm.h"
#include "server/request_parser.h"

namespace kvattn::server {

struct EnginePrompts {
  std::vector<std::vector<int32_t>> prompts;
  SamplingParams params;
  bool truncated = false;  // truncate_prompt_tokens cut at least one prompt
};

// `random_seed` is used when the request gives no seed (OpenAI: unseeded requests differ).
EnginePrompts build_prompts(const ParsedRequest& r, const LLM& llm, uint64_t random_seed);

}  // namespace kvattn::server
