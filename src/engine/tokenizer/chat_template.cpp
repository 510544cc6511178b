#include "kvattn/engine/chat_template.h"

#include <ctime>

#include "engine/tokenizer/chat_tools.h"
#include "engine/tokenizer/utf8.h"
#include "kvattn/core/error.h"

namespace kvattn {
namespace {

using tokenizer_detail::decode_utf8;
using tokenizer_detail::utf8_char_len;

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Either quoting of a Jinja string literal: '...' or "...".
bool has_literal(std::string_view src, std::string_view text) {
  for (char quote : {'\'', '"'}) {
    std::string lit(1, quote);
    lit.append(text).push_back(quote);
    if (contains(src, lit)) return true;
  }
  return false;
}

// A literal default system prompt in a ChatML template source:
//   '<|im_start|>system\nYou are ... <|im_end|>\n'   (SmolLM2, Qwen2, Qwen2.5)
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

// The literal text after `key` up to the next quote or escape: `"Today Date: ` -> ...
std::string literal_after(std::string_view src, std::string_view key) {
  const size_t at = src.find(key);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = src.substr(at + key.size());
  return std::string(rest.substr(0, rest.find_first_of("'\"\\")));
}

// Python's str.isspace(), which Jinja's trim filter (str.strip) uses.
bool is_py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = 0;  // [b, e): from the first to past the last non-space character
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_char_len(s, i);
    const size_t len = n > 0 ? static_cast<size_t>(n) : 1;
    if (n <= 0 || !is_py_space(decode_utf8(s, i, n))) {
      if (e == 0) b = i;
      e = i + len;
    }
    i += len;
  }
  return s.substr(b, e - b);
}

std::string_view after_reasoning(std::string_view content) {
  const size_t end = content.rfind("</think>");
  if (end == std::string_view::npos) return content;
  content.remove_prefix(end + 8);
  while (!content.empty() && content.front() == '\n') content.remove_prefix(1);
  return content;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof buf, "%d %b %Y", &local);
  return std::string(buf, n);
}

// Gemma's and Mistral's check: after the optional system message, user at even positions.
void check_alternation(const std::vector<ChatMessage>& msgs, size_t first, const char* what) {
  for (size_t i = first; i < msgs.size(); ++i) {
    KVATTN_CHECK((msgs[i].role == "user") == ((i - first) % 2 == 0), "chat template: ", what,
                 "conversation roles must alternate user/assistant/user/assistant/... (message ",
                 i, " is '", msgs[i].role, "')");
  }
}

std::string render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt, std::optional<bool> enable_thinking) {
  std::string out;
  size_t last_user = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  if (!messages.empty() && messages[0].role != "system" && !t.default_system_prompt.empty()) {
    out += "<|im_start|>system\n" + t.default_system_prompt + "<|im_end|>\n";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string_view content = m.content;
    if (t.strip_history_reasoning && m.role == "assistant" && i < last_user) {
      content = after_reasoning(content);
    }
    out += "<|im_start|>" + m.role + "\n";
    out += content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (t.thinking_switch && enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  std::string out = t.bos_token;
  size_t first = 0;
  if (t.llama3_dated_system) {
    std::string_view system;
    if (!messages.empty() && messages[0].role == "system") {
      system = trim(messages[0].content);
      first = 1;
    }
    const std::string date = !t.date_string.empty() ? t.date_string
                             : t.date_is_today      ? today()
                                                    : t.default_date;
    out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: " +
           t.knowledge_date + "\nToday Date: " + date + "\n\n";
    out += system;
    out += "<|eot_id|>";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    // Templates with the published tool block render these in chat_tools.cpp; this source
    // has only a part of it.
    KVATTN_CHECK(!t.llama3_dated_system || (m.role != "tool" && m.role != "ipython"),
                 "chat template: Llama 3.1+ tool results (role '", m.role,
                 "') are not supported by this template (it has no custom-tools block)");
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_gemma(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt) {
  const bool has_system = !messages.empty() && messages[0].role == "system";
  KVATTN_CHECK(!has_system || t.system == ChatTemplate::System::kFirstUser,
               "chat template: System role not supported");
  const size_t first = has_system ? 1 : 0;
  check_alternation(messages, first, "");
  std::string out = t.bos_token;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n";
    if (i == first && has_system) out += messages[0].content + "\n\n";
    out += trim(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

std::string render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  using System = ChatTemplate::System;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  const size_t first = has_system && t.system != System::kRefused ? 1 : 0;
  check_alternation(messages, first, first ? "after the optional system message, " : "");
  std::string out = t.bos_token;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      const bool with_system = has_system && ((t.system == System::kFirstUser && i == first) ||
                                              (t.system == System::kLastUser &&
                                               i + 1 == messages.size()));
      out += t.inst_open;
      if (with_system) out += messages[0].content + "\n\n";
      out += m.content + t.inst_close;
    } else {
      KVATTN_CHECK(m.role == "assistant", "chat template: only user and assistant roles are "
                   "supported, with the exception of an initial optional system message (got '",
                   m.role, "')");
      out += t.assistant_prefix;
      out += t.assistant_trim ? trim(m.content) : std::string_view(m.content);
      out += t.eos_token;
    }
  }
  return out;  // Mistral's templates have no generation prompt: [/INST] ends the prompt
}

std::optional<ChatTemplate> detect_mistral(std::string_view src) {
  ChatTemplate t;
  t.style = ChatTemplate::Style::kMistral;
  // Llama 2's <<SYS>> and Mistral v7's [SYSTEM_PROMPT] are other formats.
  if (contains(src, "<<SYS>>") || contains(src, "[SYSTEM_PROMPT]")) return std::nullopt;
  if (has_literal(src, " [INST] ")) t.inst_open = " [INST] ";
  else if (has_literal(src, "[INST] ")) t.inst_open = "[INST] ";
  else if (has_literal(src, "[INST]")) t.inst_open = "[INST]";
  else return std::nullopt;
  t.inst_close = has_literal(src, " [/INST]") ? " [/INST]" : "[/INST]";
  if (contains(src, "loop.last and system_message")) t.system = ChatTemplate::System::kLastUser;
  else if (contains(src, "loop.first and system_message")) t.system = ChatTemplate::System::kFirstUser;
  else if (contains(src, "system_message")) return std::nullopt;
  // The assistant turn is the expression ending in "+ eos_token" that reads the content.
  for (size_t at = src.find("eos_token"); at != std::string_view::npos;
       at = src.find("eos_token", at + 1)) {
    const size_t open = src.rfind("{{", at);
    if (open == std::string_view::npos) continue;
    const std::string_view expr = src.substr(open, at - open);
    if (!contains(expr, "content")) continue;
    t.assistant_prefix.assign(has_literal(expr, " ") ? 1 : 0, ' ');
    t.assistant_trim = contains(expr, "|trim") || contains(expr, "| trim");
    return t;
  }
  return std::nullopt;
}

}  // namespace

namespace chat_detail {

std::string_view py_strip(std::string_view s) { return trim(s); }

std::string llama3_date(const ChatTemplate& t) {
  return !t.date_string.empty() ? t.date_string : t.date_is_today ? today() : t.default_date;
}

void check_alternation(const std::vector<const ChatMessage*>& msgs, const char* what) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    KVATTN_CHECK((msgs[i]->role == "user") == (i % 2 == 0), "chat template: ", what,
                 "conversation roles must alternate user/assistant/user/assistant/...");
  }
}

}  // namespace chat_detail

std::optional<ChatTemplate> ChatTemplate::detect(std::string_view src) {
  if (contains(src, "<|im_start|>")) {
    ChatTemplate t;
    t.style = Style::kChatML;
    t.default_system_prompt = find_default_system_prompt(src);
    t.strip_history_reasoning = contains(src, "</think>");
    t.thinking_switch = contains(src, "enable_thinking");
    if (contains(src, "<tool_call>") && contains(src, "<tool_response>")) {
      t.tools = contains(src, "last_query_index") ? Tools::kQwen3 : Tools::kQwen25;
    }
    return t;
  }
  if (contains(src, "<|start_header_id|>")) {
    ChatTemplate t;
    t.style = Style::kLlama3;
    t.bos_token = "<|begin_of_text|>";
    if (contains(src, "Cutting Knowledge Date: ")) {
      t.llama3_dated_system = true;
      t.knowledge_date = literal_after(src, "Cutting Knowledge Date: ");
      t.default_date = literal_after(src, "set date_string = \"");
      t.date_is_today = contains(src, "strftime_now");
      // The published 3.1/3.2/3.3 templates' custom-tools block.
      if (contains(src, "Given the following functions")) t.tools = Tools::kLlama31;
    }
    return t;
  }
  if (contains(src, "<start_of_turn>")) {
    ChatTemplate t;
    t.style = Style::kGemma;
    t.bos_token = "<bos>";
    t.eos_token = "<eos>";
    if (contains(src, "first_user_prefix")) t.system = System::kFirstUser;
    return t;
  }
  if (contains(src, "[INST]")) {
    std::optional<ChatTemplate> t = detect_mistral(src);
    if (t && contains(src, "[AVAILABLE_TOOLS]") && contains(src, "[TOOL_RESULTS]")) {
      t->tools = Tools::kMistral;
    }
    return t;
  }
  return std::nullopt;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt,
                                 std::optional<bool> enable_thinking,
                                 std::string_view tools_json) const {
  if (supports_tools() && chat_detail::uses_tools(messages, tools_json)) {
    return chat_detail::render_with_tools(*this, messages, add_generation_prompt, enable_thinking,
                                          tools_json);
  }
  switch (style) {
    case Style::kChatML:
      return render_chatml(*this, messages, add_generation_prompt, enable_thinking);
    case Style::kLlama3: return render_llama3(*this, messages, add_generation_prompt);
    case Style::kGemma: return render_gemma(*this, messages, add_generation_prompt);
    case Style::kMistral: return render_mistral(*this, messages);
  }
  return {};
}

}  // namespace kvattn
