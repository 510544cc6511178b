// Chat templates. Model files ship Jinja sources; kvattn does not run Jinja. Instead it
// recognises the template family from the source and renders it natively, byte for byte as HF's
// apply_chat_template renders the published templates (tests/engine/chat_template_test.cpp
// checks that against renderings made with transformers):
//   kChatML (SmolLM2, Qwen2/2.5/3): "<|im_start|>{role}\n{content}<|im_end|>\n" per message and
//     "<|im_start|>assistant\n" as the generation prompt. SmolLM2's and Qwen2/2.5's templates
//     insert a default system message when the conversation has none; that text is read from
//     the template source. Qwen3's template drops the <think>...</think> part of earlier
//     assistant turns.
//   kLlama3: bos, then "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>";
//     generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". Llama 3.1/3.2/3.3
//     always open with a system turn "Cutting Knowledge Date: ...\nToday Date: {date}\n\n"
//     followed by the (trimmed) system message; the date is the template's literal (3.1, 3.3)
//     or today's (3.2 calls strftime_now) unless `date_string` is set.
//   kGemma: bos, "<start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n", generation prompt
//     "<start_of_turn>model\n". Gemma 3 folds the system message into the first user turn
//     ("{system}\n\n{user}"); Gemma 2 refuses it. Roles must alternate.
//   kMistral: bos, "[INST]" user turns and "{content}{eos}" assistant turns; the variants differ
//     in the spaces around [INST]/[/INST], in the assistant's leading space/trim and in where
//     the system message goes (first user turn: v0.1/v0.2 "v1"; last user turn: v0.3, Nemo;
//     refused: the original v0.1). Roles must alternate after the system message.
// Tools (OpenAI's function tools), assistant tool calls and tool results render as the family's
// published template renders them where its source has a tool format (`tools` below: Qwen2.5,
// Qwen3, Llama 3.1/3.2/3.3, Mistral v0.3 / Nemo; chat_tools.cpp); elsewhere tools are ignored,
// as the Jinja source ignores them, and a tool result is one more turn with the role "tool".
// Multimodal content parts are not rendered.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvattn {

// One call of an assistant turn (OpenAI's tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON text (templates render it parsed, as vLLM passes it)
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content, std::vector<ChatToolCall> tool_calls = {},
              std::string tool_call_id = {})
      : role(std::move(role)), content(std::move(content)), tool_calls(std::move(tool_calls)),
        tool_call_id(std::move(tool_call_id)) {}
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant; empty: none
  std::string tool_call_id;              // tool
};

struct ChatTemplate {
  enum class Style { kChatML, kLlama3, kGemma, kMistral } style = Style::kChatML;
  std::string default_system_prompt;  // kChatML: used when the first message is not "system"
  // Qwen3: assistant turns before the last user turn keep only the text after "</think>".
  bool strip_history_reasoning = false;
  // Qwen3: the template reads `enable_thinking`; false closes an empty think block after the
  // generation prompt ("<think>\n\n</think>\n\n"), so the model answers without reasoning.
  bool thinking_switch = false;
  // The template's bos_token / eos_token (set by the tokenizer loaders from the vocabulary).
  std::string bos_token = "<s>", eos_token = "</s>";

  // kLlama3 (3.1+): the system turn with the knowledge cutoff and the date.
  bool llama3_dated_system = false;
  std::string knowledge_date;   // "December 2023"
  std::string default_date;     // the template's literal date ("26 Jul 2024")
  bool date_is_today = false;   // the template calls strftime_now("%d %b %Y")
  std::string date_string;      // set: used instead of the above (as HF's date_string kwarg)

  // kGemma / kMistral: where a leading system message goes.
  enum class System { kRefused, kFirstUser, kLastUser } system = System::kRefused;
  // kMistral: "[INST] " (v0.3), " [INST] " (v1) or "[INST]" (Nemo); "[/INST]" or " [/INST]".
  std::string inst_open = "[INST] ", inst_close = "[/INST]";
  std::string assistant_prefix;  // " " (v1, v0.3) or ""
  bool assistant_trim = false;   // v0.3 trims assistant content

  // The template's tool format (detect() reads it from the source); kNone: the source renders
  // no tools, so they are ignored.
  //   kQwen25 / kQwen3: "# Tools" and <tools> in the system turn, <tool_call> JSON in assistant
  //     turns, tool results as <tool_response> parts of a user turn (Qwen3: with its
  //     last-query <think> rules);
  //   kLlama31: "Environment: ipython", the tools (JSON, indent 4) in the first user turn
  //     (tools_in_user_message, the template's default), one {"name", "parameters"} call per
  //     assistant turn, results as "ipython" turns holding the content as a JSON string;
  //   kMistral: [AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] with 9-character ids,
  //     [TOOL_RESULTS].
  enum class Tools { kNone, kQwen25, kQwen3, kLlama31, kMistral } tools = Tools::kNone;
  bool supports_tools() const { return tools != Tools::kNone; }

  // Throws kvattn::Error with the template's own message where the Jinja source raises (a
  // system message it refuses, roles that do not alternate, a Mistral call id that is not 9
  // characters long, ...).
  // enable_thinking: the template variable of that name (HF's chat_template_kwargs, vLLM's
  // request field); nullopt = undefined. Only templates with thinking_switch read it.
  // tools_json: the `tools` variable, a JSON array of OpenAI tool objects as the client wrote
  // them (key order kept); empty = none.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     std::optional<bool> enable_thinking = std::nullopt,
                     std::string_view tools_json = {}) const;

  // Recognises a Jinja template source; nullopt when it is none of the families.
  static std::optional<ChatTemplate> detect(std::string_view jinja_source);
};

}  // namespace kvattn
