#include "kvattn/engine/chat_template.h"

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

// A literal default system prompt in a ChatML template source:
//   '<|im_start|>system\nYou are ... <|im_end|>\n'   (SmolLM2, Qwen2.5)
// The text must be a plain literal (no quotes or Jinja syntax), otherwise the template builds the
// system message from the conversation (Qwen3) and there is no default.
std::string find_default_system_prompt(std::string_view src) {
  static constexpr std::string_view kOpen = "<|im_start|>system";
  for (size_t at = src.find(kOpen); at != std::string_view::npos; at = src.find(kOpen, at + 1)) {
    size_t p = at + kOpen.size();
    if (src.substr(p, 2) == "\\n") p += 2;
    else if (src.substr(p, 1) == "\n") p += 1;
    else continue;
    const size_t end = src.find("<|im_end|>", p);
    if (end == std::string_view::npos) continue;
    const std::string_view text = src.substr(p, end - p);
    if (!text.empty() && text.find_first_of("'\"{}+\\") == std::string_view::npos) {
      return std::string(text);
    }
  }
  return {};
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string_view after_reasoning(std::string_view content) {
  const size_t end = content.rfind("</think>");
  if (end == std::string_view::npos) return content;
  content.remove_prefix(end + 8);
  while (!content.empty() && content.front() == '\n') content.remove_prefix(1);
  return content;
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::detect(std::string_view src) {
  if (src.find("<|im_start|>") != std::string_view::npos) {
    ChatTemplate t;
    t.style = Style::kChatML;
    t.default_system_prompt = find_default_system_prompt(src);
    t.strip_history_reasoning = src.find("</think>") != std::string_view::npos;
    return t;
  }
  if (src.find("<|start_header_id|>") != std::string_view::npos) {
    ChatTemplate t;
    t.style = Style::kLlama3;
    return t;
  }
  return std::nullopt;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  std::string out;
  if (style == Style::kLlama3) {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += trim(m.content);
      out += "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  size_t last_user = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  if (!messages.empty() && messages[0].role != "system" && !default_system_prompt.empty()) {
    out += "<|im_start|>system\n" + default_system_prompt + "<|im_end|>\n";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string_view content = m.content;
    if (strip_history_reasoning && m.role == "assistant" && i < last_user) {
      content = after_reasoning(content);
    }
    out += "<|im_start|>" + m.role + "\n";
    out += content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvattn
