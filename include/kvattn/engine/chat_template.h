// Chat templates. Model files ship Jinja sources; kvattn does not run Jinja. Instead it
// recognises the template family from the source and renders it natively:
//   kChatML (SmolLM2, Qwen2/3): "<|im_start|>{role}\n{content}<|im_end|>\n" per message and
//     "<|im_start|>assistant\n" as the generation prompt. SmolLM2's template inserts a default
//     system message when the conversation has none; that text is read from the template source.
//     Qwen3's template drops the <think>...</think> part of earlier assistant turns.
//   kLlama3: "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" after
//     "<|begin_of_text|>"; generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvattn {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct ChatTemplate {
  enum class Style { kChatML, kLlama3 } style = Style::kChatML;
  std::string default_system_prompt;  // used when the first message is not "system"; "" = none
  // Qwen3: assistant turns before the last user turn keep only the text after "</think>".
  bool strip_history_reasoning = false;

  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // Recognises a Jinja template source; nullopt when it is neither family.
  static std::optional<ChatTemplate> detect(std::string_view jinja_source);
};

}  // namespace kvattn
