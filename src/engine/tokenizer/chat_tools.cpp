// Tools, tool calls and tool results in the chat templates that have a tool format. Each
// renderer follows its published Jinja source line by line (the sources are in
// tests/engine/chat_tools_test_data.inc, which checks the output against transformers').
// Messages reach the templates as vLLM passes them: a call's arguments parsed into an object,
// a null content as "".
#include "engine/tokenizer/chat_tools.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "kvattn/core/error.h"

namespace kvattn::chat_detail {
namespace {

using Json = nlohmann::ordered_json;
using Tools = ChatTemplate::Tools;

void put_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Python's repr of a double: the shortest round-trip digits (std::to_chars; nlohmann's grisu2
// is not always shortest), in fixed notation when the decimal point position p satisfies
// -4 < p <= 16, else d.ddde[+-]XX.
std::string py_float(double d) {
  if (!std::isfinite(d)) return d != d ? "NaN" : (d > 0 ? "Infinity" : "-Infinity");
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string s(buf, r.ptr);
  size_t at = 0;
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    at = 1;
  }
  const size_t e = s.find_first_of("eE", at);
  const std::string mantissa = s.substr(at, e == std::string::npos ? std::string::npos : e - at);
  const int exp10 = e == std::string::npos ? 0 : std::stoi(s.substr(e + 1));
  const size_t dot = mantissa.find('.');
  std::string digits = mantissa;
  if (dot != std::string::npos) digits.erase(dot, 1);
  int point = static_cast<int>(dot == std::string::npos ? mantissa.size() : dot) + exp10;
  const size_t lead = digits.find_first_not_of('0');
  if (lead == std::string::npos) return sign + "0.0";
  digits.erase(0, lead);
  point -= static_cast<int>(lead);
  digits.erase(digits.find_last_not_of('0') + 1);
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    if (point >= n) return sign + digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(point)) + "." +
           digits.substr(static_cast<size_t>(point));
  }
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%+03d", point - 1);
  return sign + digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "") + exp;
}

void put_json(std::string& out, const Json& j, int indent, int level) {
  const auto newline = [&](int lv) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lv), ' ');
  };
  switch (j.type()) {
    case Json::value_t::object:
    case Json::value_t::array: {
      const bool object = j.is_object();
      if (j.empty()) {
        out += object ? "{}" : "[]";
        return;
      }
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        if (indent >= 0) newline(level + 1);
        if (object) {
          put_string(out, it.key());
          out += ": ";
        }
        put_json(out, *it, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += object ? '}' : ']';
      return;
    }
    case Json::value_t::string: put_string(out, j.get_ref<const std::string&>()); return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: out += std::to_string(j.get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(j.get<uint64_t>()); return;
    case Json::value_t::number_float: out += py_float(j.get<double>()); return;
    default: out += "null"; return;
  }
}

Json parse(std::string_view text, const char* what) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    KVATTN_FAIL("chat template: ", what, " is not valid JSON: ", e.what());
  }
}

Json arguments(const ChatToolCall& c) { return parse(c.arguments, "a tool call's arguments"); }

std::string qwen_call(const ChatToolCall& c) {
  return "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + py_json(arguments(c)) +
         "}\n</tool_call>";
}

std::string strip_newlines(std::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return std::string(s);
}

bool starts_ends(std::string_view s, std::string_view a, std::string_view b) {
  return s.substr(0, a.size()) == a && s.size() >= b.size() && s.substr(s.size() - b.size()) == b;
}

// Qwen2.5's and Qwen3's templates (they share the tools block and the tool turns).
std::string render_qwen(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, bool gen,
                        std::optional<bool> enable_thinking, const Json& tools) {
  const bool qwen3 = t.tools == Tools::kQwen3;
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
  std::string out;
  if (tools.is_array() && !tools.empty()) {
    out += "<|im_start|>system\n";
    if (has_system) out += msgs[0].content + "\n\n";
    else if (!qwen3) out += t.default_system_prompt + "\n\n";
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const Json& tool : tools) out += "\n" + py_json(tool);
    out += "\n</tools>\n\nFor each function call, return a json object with function name and "
           "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
           "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (has_system) {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  } else if (!qwen3) {
    out += "<|im_start|>system\n" + t.default_system_prompt + "<|im_end|>\n";
  }
  // Qwen3: the last user turn that is not a wrapped tool response ends the history whose
  // reasoning is dropped.
  size_t last_query = msgs.size() - 1;
  for (size_t i = msgs.size(); i-- > 0;) {
    if (msgs[i].role == "user" &&
        !starts_ends(msgs[i].content, "<tool_response>", "</tool_response>")) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || (m.role == "system" && i > 0) ||
        (!qwen3 && m.role == "assistant" && m.tool_calls.empty())) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant" && !qwen3) {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) out += "\n" + m.content;
      for (const ChatToolCall& c : m.tool_calls) out += "\n" + qwen_call(c);
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      if (const size_t end = m.content.rfind("</think>"); end != std::string::npos) {
        content = strip_newlines(std::string_view(m.content).substr(end + 8), true, false);
        std::string before = strip_newlines(m.content.substr(0, m.content.find("</think>")),
                                            false, true);
        const size_t open = before.rfind("<think>");
        if (open != std::string::npos) before.erase(0, open + 7);
        reasoning = strip_newlines(before, true, false);
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n" + strip_newlines(reasoning, true, true) +
               "\n</think>\n\n" + strip_newlines(content, true, false);
      } else {
        out += "<|im_start|>assistant\n" + content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) out += "\n";
        out += qwen_call(m.tool_calls[k]);
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (last || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (gen) {
    out += "<|im_start|>assistant\n";
    if (t.thinking_switch && enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// Llama 3.1 / 3.2 / 3.3 with tools_in_user_message at its default (true), no builtin_tools.
std::string render_llama31(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, bool gen,
                           const Json& tools) {
  const bool has_tools = tools.is_array();
  std::string out = t.bos_token;
  size_t first = 0;
  std::string system;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = py_strip(msgs[0].content);
    first = 1;
  }
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  if (has_tools) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: " + t.knowledge_date + "\nToday Date: " + llama3_date(t) +
         "\n\n" + system + "<|eot_id|>";
  if (has_tools) {
    KVATTN_CHECK(first < msgs.size(), "chat template: Cannot put tools in the first user message "
                 "when there's no first user message!");
    out += "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
           "respond with a JSON for a function call with its proper arguments that best answers "
           "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
           "dictionary of argument name and its value}.Do not use variables.\n\n";
    for (const Json& tool : tools) out += py_json(tool, 4) + "\n\n";
    out += std::string(py_strip(msgs[first].content)) + "<|eot_id|>";
    ++first;
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role != "tool" && m.role != "ipython" && m.tool_calls.empty()) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += py_strip(m.content);
      out += "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      KVATTN_CHECK(m.tool_calls.size() == 1,
                   "chat template: This model only supports single tool-calls at once!");
      const ChatToolCall& c = m.tool_calls[0];
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" + c.name +
             "\", \"parameters\": " + py_json(arguments(c)) + "}<|eot_id|>";
    } else {  // a string is iterable to Jinja: the content goes out as a JSON string
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + py_json(Json(m.content)) +
             "<|eot_id|>";
    }
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

size_t char_count(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

void check_mistral_id(const std::string& id) {
  KVATTN_CHECK(char_count(id) == 9,
               "chat template: Tool call IDs should be alphanumeric strings with length 9!");
}

// Mistral v0.3 / Nemo: tools before the last user turn (a string value verbatim, others as
// JSON), calls as the function object with its id, results with the content verbatim.
std::string render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& msgs,
                           const Json& tools) {
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
  const size_t first = has_system ? 1 : 0;
  std::vector<const ChatMessage*> turns;  // the alternation skips calls and results
  const ChatMessage* last_user = nullptr;
  for (size_t i = first; i < msgs.size(); ++i) {
    if (msgs[i].role != "tool" && msgs[i].tool_calls.empty()) turns.push_back(&msgs[i]);
    if (msgs[i].role == "user") last_user = &msgs[i];
  }
  check_alternation(turns, "After the optional system message, ");
  std::string out = t.bos_token;
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user") {
      // The template compares messages by value: an earlier turn equal to the last one gets
      // the tools too.
      if (tools.is_array() && m.content == last_user->content) {
        out += "[AVAILABLE_TOOLS][";
        for (size_t k = 0; k < tools.size(); ++k) {
          KVATTN_CHECK(tools[k].is_object() && tools[k].contains("function") &&
                           tools[k]["function"].is_object(),
                       "chat template: a tool has no \"function\" object");
          out += "{\"type\": \"function\", \"function\": {";
          bool first_key = true;
          for (const auto& [key, val] : tools[k]["function"].items()) {
            if (key == "return") continue;
            if (!first_key) out += ", ";
            first_key = false;
            out += "\"" + key + "\": ";
            out += val.is_string() ? "\"" + val.get<std::string>() + "\"" : py_json(val);
          }
          out += k + 1 < tools.size() ? "}}, " : "}}]";
        }
        out += "[/AVAILABLE_TOOLS]";
      }
      out += t.inst_open;
      if (has_system && i + 1 == msgs.size()) out += msgs[0].content + "\n\n";
      out += m.content + t.inst_close;
    } else if (!m.tool_calls.empty()) {
      out += "[TOOL_CALLS][";
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ChatToolCall& c = m.tool_calls[k];
        out += "{\"name\": " + py_json(Json(c.name)) + ", \"arguments\": " +
               py_json(arguments(c));
        check_mistral_id(c.id);
        out += ", \"id\": \"" + c.id + "\"}";
        out += k + 1 < m.tool_calls.size() ? ", " : "]" + t.eos_token;
      }
    } else if (m.role == "assistant") {
      out += t.assistant_prefix;
      out += t.assistant_trim ? py_strip(m.content) : std::string_view(m.content);
      out += t.eos_token;
    } else if (m.role == "tool") {
      out += "[TOOL_RESULTS]{\"content\": " + m.content + ", ";
      check_mistral_id(m.tool_call_id);
      out += "\"call_id\": \"" + m.tool_call_id + "\"}[/TOOL_RESULTS]";
    } else {
      KVATTN_FAIL("chat template: Only user and assistant roles are supported, with the "
                  "exception of an initial optional system message! (got '", m.role, "')");
    }
  }
  return out;
}

}  // namespace

std::string py_json(const nlohmann::ordered_json& j, int indent) {
  std::string out;
  put_json(out, j, indent, 0);
  return out;
}

bool uses_tools(const std::vector<ChatMessage>& messages, std::string_view tools_json) {
  if (!tools_json.empty()) return true;
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || !m.tool_calls.empty()) return true;
  }
  return false;
}

std::string render_with_tools(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, std::optional<bool> enable_thinking,
                              std::string_view tools_json) {
  const Json tools = tools_json.empty() ? Json() : parse(tools_json, "tools");
  KVATTN_CHECK(tools.is_null() || tools.is_array(), "chat template: tools must be a list");
  switch (t.tools) {
    case Tools::kQwen25:
    case Tools::kQwen3:
      return render_qwen(t, messages, add_generation_prompt, enable_thinking, tools);
    case Tools::kLlama31: return render_llama31(t, messages, add_generation_prompt, tools);
    case Tools::kMistral: return render_mistral(t, messages, tools);
    case Tools::kNone: break;
  }
  KVATTN_FAIL("chat template: this template has no tool format");
}

}  // namespace kvattn::chat_detail
