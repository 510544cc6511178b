#include "server/tool_output.h"

#include <cstdio>

namespace kvattn::server {

std::string ToolOutput::finish_reason(FinishReason r, bool any_calls) const {
  if (!any_calls) return std::string(finish_reason_name(r));
  return named_choice ? "stop" : "tool_calls";
}

std::vector<ToolCallOut> ToolOutput::to_calls(std::vector<ParsedToolCall> parsed, size_t already,
                                              const std::function<uint64_t()>& random) const {
  static constexpr char kAlnum[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::vector<ToolCallOut> out;
  for (ParsedToolCall& p : parsed) {
    if (single && already + out.size() >= 1) break;
    std::string id;
    if (mistral_ids) {
      uint64_t bits = random();
      for (int i = 0; i < 9; ++i, bits /= 62) id += kAlnum[bits % 62];
    } else {
      char hex[33];
      std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(random()),
                    static_cast<unsigned long long>(random()));
      id = std::string("chatcmpl-tool-") + hex;
    }
    out.push_back({std::move(id), std::move(p.name), std::move(p.arguments)});
  }
  return out;
}

std::optional<ToolOutput> tool_output(const ParsedRequest& r, const LLM& llm) {
  using Choice = ToolRequest::Choice;
  using Tools = ChatTemplate::Tools;
  if (r.endpoint != Endpoint::kChat || r.tools.choice == Choice::kNone) return std::nullopt;
  ToolOutput t;
  for (const ToolSpec& s : r.tools.tools) t.names.insert(s.name);
  t.single = !r.tools.parallel;
  const std::optional<ChatTemplate>& tmpl = llm.tokenizer()->chat_template();
  t.mistral_ids = tmpl && tmpl->tools == Tools::kMistral;
  if (r.tools.choice == Choice::kNamed) {
    t.format = ToolFormat::kNamed;
    t.named = r.tools.named;
    t.named_choice = true;
  } else if (r.tools.choice == Choice::kRequired) {
    t.format = ToolFormat::kRequired;
  } else {  // auto: prompt_builder refused templates without a tool format
    t.format = tmpl->tools == Tools::kLlama31 ? ToolFormat::kLlama3Json
               : tmpl->tools == Tools::kMistral ? ToolFormat::kMistral
                                                : ToolFormat::kHermes;
  }
  return t;
}

}  // namespace kvattn::server
