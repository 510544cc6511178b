#include "server/request_parser.h"

#include <cmath>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/structured_fields.h"
#include "server/tool_request.h"

namespace kvattn::server {
namespace {

// Ordered: a JSON schema's properties keep the order the client wrote them in.
using Json = nlohmann::ordered_json;

// Deepest nesting of arrays/objects, scanning past strings. Checked before parsing so that
// a body of a million '[' is a clear 400, never a deep recursion anywhere.
int json_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : s) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::string type_name(const Json& j) { return j.type_name(); }

// A JSON number written with a fraction or exponent that has an integral value (5.0, 1e3):
// that value, as vLLM's (pydantic's) integer fields take it. Anything else: none.
std::optional<int64_t> integral_value(const Json& j) {
  if (!j.is_number_float()) return std::nullopt;
  const double d = j.get<double>();
  // 2^63 is exact in a double; every integral double in (-2^63, 2^63) fits int64_t.
  if (!std::isfinite(d) || d != std::trunc(d) || d < -9.223372036854775808e18 ||
      d >= 9.223372036854775808e18) {
    return std::nullopt;
  }
  return static_cast<int64_t>(d);
}

int64_t get_int(const Json& j, const char* name, int64_t lo, int64_t hi) {
  if (const std::optional<int64_t> v = integral_value(j)) {
    if (*v < lo || *v > hi) {
      throw bad_request(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "] but is " + j.dump(),
                        name);
    }
    return *v;
  }
  if (!j.is_number_integer()) {
    throw bad_request(std::string(name) + " must be an integer but is " +
                          (j.is_number_float() ? j.dump() : type_name(j)),
                      name);
  }
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    throw bad_request(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "] but is " + j.dump(),
                      name);
  }
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) {
    throw bad_request(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "] but is " + std::to_string(v),
                      name);
  }
  return v;
}

double get_number(const Json& j, const char* name, double lo, double hi, bool lo_open = false) {
  if (!j.is_number()) {
    throw bad_request(std::string(name) + " must be a number but is " + type_name(j), name);
  }
  const double v = j.get<double>();
  if (!std::isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo)) {
    Json shown = v;
    throw bad_request(std::string(name) + " must be in " + (lo_open ? "(" : "[") +
                          Json(lo).dump() + ", " + Json(hi).dump() + "] but is " +
                          (std::isfinite(v) ? shown.dump() : std::string("not finite")),
                      name);
  }
  return v;
}

bool get_bool(const Json& j, const char* name) {
  if (!j.is_boolean()) {
    throw bad_request(std::string(name) + " must be a boolean but is " + type_name(j), name);
  }
  return j.get<bool>();
}

const std::string& get_string(const Json& j, const char* name) {
  if (!j.is_string()) {
    throw bad_request(std::string(name) + " must be a string but is " + type_name(j), name);
  }
  return j.get_ref<const std::string&>();
}

std::vector<int32_t> token_ids(const Json& j, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const Json& t : j) {
    ids.push_back(static_cast<int32_t>(get_int(t, name, 0, std::numeric_limits<int32_t>::max())));
  }
  return ids;
}

bool is_int_array(const Json& j) { return j.is_array() && !j.empty() && j[0].is_number(); }

void parse_prompt(const Json& j, ParsedRequest& r) {
  constexpr const char* kName = "prompt";
  if (j.is_string()) {
    r.text_prompts.push_back(j.get<std::string>());
    return;
  }
  if (!j.is_array() || j.empty()) {
    throw bad_request("prompt must be a string, a list of strings, a list of token ids or a "
                      "list of token-id lists, and not empty",
                      kName);
  }
  if (is_int_array(j)) {
    r.id_prompts.push_back(token_ids(j, kName));
    return;
  }
  if (j.size() > kMaxPrompts) {
    throw bad_request("prompt holds " + std::to_string(j.size()) + " prompts; at most " +
                          std::to_string(kMaxPrompts) + " per request",
                      kName);
  }
  for (const Json& p : j) {
    if (p.is_string() && r.id_prompts.empty()) {
      r.text_prompts.push_back(p.get<std::string>());
    } else if (is_int_array(p) && r.text_prompts.empty()) {
      r.id_prompts.push_back(token_ids(p, kName));
    } else {
      throw bad_request("prompt lists must hold only strings or only non-empty token-id lists",
                        kName);
    }
  }
}

std::string message_content(const Json& c, size_t i, const std::string& role) {
  const std::string name = "messages[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null() && role == "assistant") return {};
  if (!c.is_array()) {
    throw bad_request(name + " must be a string or a list of text parts but is " +
                          type_name(c),
                      "messages");
  }
  // Several text parts are joined by newlines, as vLLM renders them for string templates.
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const Json& part = c[k];
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      throw bad_request(name + ": only {\"type\": \"text\", \"text\": \"...\"} parts are "
                               "supported",
                        "messages");
    }
    if (k > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

// Fields an OpenAI or vLLM response's message carries, which clients send back in their
// history (`messages.append(choice.message.model_dump())`): taken at values that say nothing
// (null, an empty list) or, for what a chat template would not render here (a refusal, the
// reasoning text, annotations), ignored. The deprecated function_call and audio are refused
// (tool_calls are parse_messages'). True for such a field; false for any other key.
bool is_history_field(const std::string& key, const Json& v, const std::string& at) {
  if (key == "function_call" || key == "audio") {
    if (v.is_null() || (v.is_array() && v.empty())) return true;
    throw bad_request(at + "." + key + " is not supported by kvattn (use tool_calls; no audio)",
                      "messages", "unsupported_parameter");
  }
  if (key == "refusal" || key == "reasoning_content" || key == "reasoning") {
    if (v.is_null() || v.is_string()) return true;
    throw bad_request(at + "." + key + " must be a string or null but is " + type_name(v),
                      "messages");
  }
  if (key == "annotations") {
    if (v.is_null() || v.is_array()) return true;
    throw bad_request(at + ".annotations must be a list or null but is " + type_name(v),
                      "messages");
  }
  return false;
}

void parse_messages(const Json& j, ParsedRequest& r) {
  if (!j.is_array() || j.empty()) {
    throw bad_request("messages must be a non-empty list of messages", "messages");
  }
  if (j.size() > kMaxMessages) {
    throw bad_request("messages holds " + std::to_string(j.size()) + " messages; at most " +
                          std::to_string(kMaxMessages),
                      "messages");
  }
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& m = j[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request(at + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) {
      throw bad_request(at + ".role must be a string", "messages");
    }
    std::string role = m["role"].get<std::string>();
    for (const auto& [key, value] : m.items()) {
      const bool own = key == "role" || key == "content" || key == "name" ||
                       (key == "tool_calls" && role == "assistant") ||
                       (key == "tool_call_id" && role == "tool");
      if (!own && !is_history_field(key, value, at)) {
        throw bad_request(at + ": unsupported field '" + key + "' (role " + role + ")",
                          "messages");
      }
    }
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      throw bad_request(at + ".role must be system, developer, user, assistant or tool but is '" +
                            role + "'",
                        "messages");
    }
    ChatMessage msg;
    msg.role = role;
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      msg.tool_calls = parse_message_tool_calls(m["tool_calls"], at);
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()) {
        throw bad_request(at + ".tool_call_id must be a string (the call this result answers) "
                               "but is " +
                              (m.contains("tool_call_id") ? type_name(m["tool_call_id"])
                                                          : std::string("missing")),
                          "messages");
      }
      msg.tool_call_id = m["tool_call_id"].get<std::string>();
    }
    // OpenAI: an assistant turn's content may be left out next to its tool calls.
    if (!m.contains("content") && msg.tool_calls.empty()) {
      throw bad_request(at + ".content is missing", "messages");
    }
    if (m.contains("content")) msg.content = message_content(m["content"], i, role);
    r.messages.push_back(std::move(msg));
  }
}

void parse_stop(const Json& j, SamplingParams& p) {
  if (j.is_string()) {
    p.stop.push_back(j.get<std::string>());
  } else if (j.is_array()) {
    if (j.size() > kMaxStops) {
      throw bad_request("stop holds " + std::to_string(j.size()) + " strings; at most " +
                            std::to_string(kMaxStops),
                        "stop");
    }
    for (const Json& s : j) p.stop.push_back(get_string(s, "stop"));
  } else {
    throw bad_request("stop must be a string or a list of strings but is " + type_name(j),
                      "stop");
  }
  for (const auto& s : p.stop) {
    if (s.empty()) throw bad_request("stop strings must not be empty", "stop");
  }
}

// Fields accepted only at their "off" value, since kvattn does not implement them.
// OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...}; ids beyond the vocabulary
// are the engine's to refuse (it knows the vocabulary).
void parse_logit_bias(const Json& v, SamplingParams& p) {
  const char* k = "logit_bias";
  if (!v.is_object()) throw bad_request("logit_bias must be an object but is " + type_name(v), k);
  if (v.size() > kMaxLogitBias) {
    throw bad_request("logit_bias has " + std::to_string(v.size()) + " entries; at most " +
                          std::to_string(kMaxLogitBias) + " are accepted",
                      k);
  }
  for (const auto& [id, bias] : v.items()) {
    int64_t token = -1;
    const bool digits = !id.empty() && id.size() <= 9 &&
                        id.find_first_not_of("0123456789") == std::string::npos;
    if (digits) token = std::stoll(id);
    if (!digits) {
      throw bad_request("logit_bias keys must be token ids (decimal strings) but one is '" + id +
                            "'",
                        k);
    }
    p.logit_bias.emplace_back(static_cast<int32_t>(token),
                              static_cast<float>(get_number(bias, k, -100.0, 100.0)));
  }
}

// Fields that clients send at values meaning "nothing to do" here: true when `key` is one
// of them at such a value; a 400 naming it at any other value; false for other keys.
//   modalities (chat) ["text"]: text out is all kvattn makes.
//   priority 0 (vLLM's): the default; kvattn schedules first come, first served.
bool is_no_op_field(const std::string& key, const Json& v, bool chat) {
  const char* k = key.c_str();
  if (chat && key == "modalities") {
    if (v == Json::array({"text"})) return true;
    throw bad_request("modalities: only [\"text\"] is supported", k, "unsupported_parameter");
  }
  if (key == "priority") {
    if (get_int(v, k, std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max()) == 0) {
      return true;
    }
    throw bad_request("priority must be 0: kvattn schedules requests in arrival order", k,
                      "unsupported_parameter");
  }
  return false;
}

// vLLM's chat_template_kwargs, the chat template's variables. The templates are rendered
// natively (chat_template.h), so only the variable they read is taken: Qwen3's
// enable_thinking (templates without the switch ignore it, as Jinja ignores an unused one).
void parse_template_kwargs(const Json& v, std::optional<bool>& enable_thinking) {
  const char* k = "chat_template_kwargs";
  if (!v.is_object()) {
    throw bad_request("chat_template_kwargs must be an object but is " + type_name(v), k);
  }
  for (const auto& [name, value] : v.items()) {
    if (value.is_null()) continue;
    if (name != "enable_thinking") {
      throw bad_request("chat_template_kwargs: only enable_thinking is supported, not '" + name +
                            "'",
                        k, "unsupported_parameter");
    }
    enable_thinking = get_bool(value, "chat_template_kwargs.enable_thinking");
  }
}

// The body as a JSON object (400 invalid_json otherwise, and past kMaxJsonDepth).
Json body_object(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth) {
    throw bad_request("request body nests deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels",
                      "", "invalid_json");
  }
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    throw bad_request(std::string("request body is not valid JSON: ") + e.what(), "",
                      "invalid_json");
  }
  if (!j.is_object()) {
    throw bad_request("request body must be a JSON object but is " + type_name(j), "",
                      "invalid_json");
  }
  return j;
}

}  // namespace

nlohmann::ordered_json parse_body_object(std::string_view body) { return body_object(body); }

ParsedRequest parse_request(std::string_view body, Endpoint endpoint) {
  const Json j = body_object(body);
  ParsedRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChat;
  SamplingParams& p = r.params;
  p.temperature = 1.0f;          // OpenAI's default (kvattn's own default is greedy)
  p.max_tokens = chat ? 0 : 16;  // chat: up to the context (prompt_builder), completions: 16
  bool have_prompt = false;
  int64_t best_of = 0;
  bool chat_logprobs = false;  // chat's logprobs (a bool there; completions': a count)
  // Chat: max_completion_tokens replaces max_tokens (OpenAI); given both, it wins (vLLM).
  std::optional<int> max_tokens, max_completion_tokens;
  int top_logprobs = 0;
  bool add_generation_prompt_given = false;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;  // OpenAI: null means not given
    const char* k = key.c_str();
    if (key == "model") {
      r.model = get_string(v, k);
    } else if (key == "prompt" && !chat) {
      parse_prompt(v, r);
      have_prompt = true;
    } else if (key == "messages" && chat) {
      parse_messages(v, r);
      have_prompt = true;
    } else if (key == "max_tokens" || (key == "max_completion_tokens" && chat)) {
      // Completions take 0 with echo (score the prompt, generate nothing), checked below.
      const int m = static_cast<int>(get_int(v, k, chat ? 1 : 0, std::numeric_limits<int32_t>::max()));
      (key == "max_tokens" ? max_tokens : max_completion_tokens) = m;
    } else if (key == "temperature") {
      p.temperature = static_cast<float>(get_number(v, k, 0.0, 2.0));
    } else if (key == "top_p") {
      p.top_p = static_cast<float>(get_number(v, k, 0.0, 1.0, /*lo_open=*/true));
    } else if (key == "top_k") {
      const int64_t t = get_int(v, k, -1, std::numeric_limits<int32_t>::max());
      p.top_k = t < 0 ? 0 : static_cast<int>(t);
    } else if (key == "min_p") {
      p.min_p = static_cast<float>(get_number(v, k, 0.0, 1.0));
    } else if (key == "seed") {
      p.seed = static_cast<uint64_t>(
          get_int(v, k, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
      r.seed_given = true;
    } else if (key == "stop") {
      parse_stop(v, p);
    } else if (key == "include_stop_str_in_output") {  // vLLM's extension
      p.include_stop_str_in_output = get_bool(v, k);
    } else if (key == "n") {
      p.n = static_cast<int>(get_int(v, k, 1, 128));
    } else if (key == "stream") {
      r.stream = get_bool(v, k);
    } else if (key == "stream_options") {
      if (!v.is_object()) throw bad_request("stream_options must be an object", k);
      for (const auto& [ok, ov] : v.items()) {
        if (ok == "include_usage") {
          if (!ov.is_null()) r.include_usage = get_bool(ov, "stream_options.include_usage");
        } else if (ok == "continuous_usage_stats") {  // vLLM's: usage in every chunk
          if (!ov.is_null() && get_bool(ov, "stream_options.continuous_usage_stats")) {
            throw bad_request("stream_options.continuous_usage_stats is not supported by "
                              "kvattn (include_usage sends the usage once, at the end)",
                              k, "unsupported_parameter");
          }
        } else {
          throw bad_request("stream_options: unknown field '" + ok + "'", k);
        }
      }
    } else if (key == "ignore_eos") {
      p.ignore_eos = get_bool(v, k);
    } else if (key == "return_token_ids") {
      r.return_token_ids = get_bool(v, k);
    } else if (key == "skip_special_tokens") {
      p.skip_special_tokens = get_bool(v, k);
    } else if (key == "user" || key == "service_tier") {  // no effect here
      (void)get_string(v, k);
    } else if (key == "store") {  // nothing stored
      (void)get_bool(v, k);
    } else if (key == "parallel_tool_calls") {
      r.tools.parallel = get_bool(v, k);
    } else if (key == "tools" && chat) {
      parse_tools(v, r.tools);
    } else if (key == "tool_choice" && chat) {
      parse_tool_choice(v, r.tools);
    } else if (key == "metadata") {  // kept by OpenAI with stored completions: no effect here
      if (!v.is_object()) throw bad_request("metadata must be an object but is " + type_name(v), k);
    } else if (is_no_op_field(key, v, chat)) {
      // modalities: ["text"], priority: 0 (below).
    } else if (key == "logprobs" && chat) {
      chat_logprobs = get_bool(v, k);
    } else if (key == "top_logprobs" && chat) {
      top_logprobs = static_cast<int>(get_int(v, k, 0, SamplingParams::kMaxLogprobs));
    } else if (key == "logprobs") {  // completions: how many alternatives, null = none
      p.logprobs = static_cast<int>(get_int(v, k, 0, SamplingParams::kMaxLogprobs));
    } else if (key == "presence_penalty") {
      p.presence_penalty = static_cast<float>(get_number(v, k, -2.0, 2.0));
    } else if (key == "frequency_penalty") {
      p.frequency_penalty = static_cast<float>(get_number(v, k, -2.0, 2.0));
    } else if (key == "repetition_penalty") {  // vLLM's extension
      p.repetition_penalty = static_cast<float>(get_number(v, k, 0.0, 100.0, /*lo_open=*/true));
    } else if (key == "logit_bias") {
      parse_logit_bias(v, p);
    } else if (key == "min_tokens") {  // vLLM's extension (<= max_tokens: prompt_builder)
      p.min_tokens = static_cast<int>(get_int(v, k, 0, std::numeric_limits<int32_t>::max()));
    } else if (key == "stop_token_ids") {  // vLLM's extension
      if (!v.is_array() || v.size() > kMaxStops) {
        throw bad_request("stop_token_ids must be a list of at most " + std::to_string(kMaxStops) +
                              " token ids",
                          k);
      }
      p.stop_token_ids = token_ids(v, k);
    } else if (key == "allowed_token_ids") {  // vLLM's extension
      if (!v.is_array() || v.empty() || v.size() > kMaxAllowedTokenIds) {
        throw bad_request("allowed_token_ids must be a non-empty list of at most " +
                              std::to_string(kMaxAllowedTokenIds) + " token ids",
                          k);
      }
      p.allowed_token_ids = token_ids(v, k);
    } else if (key == "bad_words") {  // vLLM's extension
      if (!v.is_array() || v.size() > kMaxBadWords) {
        throw bad_request("bad_words must be a list of at most " + std::to_string(kMaxBadWords) +
                              " strings",
                          k);
      }
      for (const Json& w : v) {
        r.bad_words.push_back(get_string(w, k));
        if (r.bad_words.back().find_first_not_of(" \t\n\r") == std::string::npos) {
          throw bad_request("bad_words must not hold empty or blank strings", k);
        }
      }
    } else if (key == "truncate_prompt_tokens") {  // vLLM's extension
      const int64_t t = get_int(v, k, -1, std::numeric_limits<int32_t>::max());
      if (t == 0) {
        throw bad_request("truncate_prompt_tokens must be -1 (the context's length) or >= 1 "
                          "but is 0",
                          k);
      }
      r.truncate_prompt_tokens = t;
    } else if (key == "echo" && !chat) {
      r.echo = get_bool(v, k);
    } else if (key == "best_of" && !chat) {
      best_of = get_int(v, k, 1, 128);
    } else if (key == "suffix" && !chat) {
      throw bad_request("suffix is not supported by kvattn", k, "unsupported_parameter");
    } else if (key == "add_generation_prompt" && chat) {
      r.add_generation_prompt = get_bool(v, k);
      add_generation_prompt_given = true;
    } else if (key == "continue_final_message" && chat) {  // vLLM's
      r.continue_final_message = get_bool(v, k);
    } else if (key == "request_id") {  // vLLM's
      r.request_id = get_string(v, k);
      if (r.request_id.size() > kMaxRequestIdBytes) {
        throw bad_request("request_id must be at most " + std::to_string(kMaxRequestIdBytes) +
                              " bytes but has " + std::to_string(r.request_id.size()),
                          k);
      }
    } else if (key == "chat_template_kwargs" && chat) {
      parse_template_kwargs(v, r.enable_thinking);
    } else if (parse_structured_field(key, v, p.structured)) {
      // response_format, guided_json / guided_regex / guided_choice, structured_outputs
    } else {
      throw bad_request("unknown parameter '" + key + "'", key, "unknown_parameter");
    }
  }
  if (max_completion_tokens || max_tokens) {
    p.max_tokens = max_completion_tokens ? *max_completion_tokens : *max_tokens;
    r.max_tokens_given = true;
    r.max_tokens_field = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  }
  if (chat) {
    // OpenAI: top_logprobs needs logprobs: true; logprobs alone returns the tokens' own.
    if (top_logprobs > 0 && !chat_logprobs) {
      throw bad_request("top_logprobs needs logprobs: true", "top_logprobs");
    }
    p.logprobs = chat_logprobs ? top_logprobs : -1;
    finish_tool_request(r.tools, p.structured);
    using Choice = ToolRequest::Choice;
    if (r.tools.choice == Choice::kRequired || r.tools.choice == Choice::kNamed) {
      p.structured = tool_constraint(r.tools);
    }
  }
  if (r.continue_final_message) {  // vLLM: both true is an error; given alone, no prompt opens
    if (add_generation_prompt_given && r.add_generation_prompt) {
      throw bad_request("continue_final_message and add_generation_prompt cannot both be true",
                        "continue_final_message");
    }
    r.add_generation_prompt = false;
  }
  if (!have_prompt) {
    const char* what = chat ? "messages" : "prompt";
    throw bad_request(std::string(what) + " is required", what, "missing_required_parameter");
  }
  if (best_of != 0 && best_of != p.n) {
    throw bad_request("best_of must equal n (kvattn returns every sample)", "best_of",
                      "unsupported_parameter");
  }
  if (!chat && p.max_tokens == 0 && !r.echo) {
    throw bad_request("max_tokens must be >= 1 (0 only with echo: true)", "max_tokens");
  }
  if (r.echo && r.stream) {
    throw bad_request("echo with stream: true is not supported by kvattn", "echo",
                      "unsupported_parameter");
  }
  // OpenAI's echo with logprobs: the prompt tokens' log-probabilities too (the first token's
  // is null), with as many alternatives.
  if (r.echo) p.prompt_logprobs = p.logprobs;
  if (r.include_usage && !r.stream) {
    throw bad_request("stream_options is only allowed with stream: true", "stream_options");
  }
  return r;
}

TokenizeRequest parse_tokenize(std::string_view body) {
  const Json j = body_object(body);
  TokenizeRequest r;
  bool have_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    const char* k = key.c_str();
    if (key == "model") {
      r.model = get_string(v, k);
    } else if (key == "prompt") {
      r.prompt = get_string(v, k);
      have_prompt = true;
    } else if (key == "messages") {
      ParsedRequest m;
      parse_messages(v, m);
      r.messages = std::move(m.messages);
    } else if (key == "add_special_tokens") {
      r.add_special_tokens = get_bool(v, k);
    } else if (key == "add_generation_prompt") {
      r.add_generation_prompt = get_bool(v, k);
    } else if (key == "chat_template_kwargs") {
      parse_template_kwargs(v, r.enable_thinking);
    } else if (key == "tools") {
      ToolRequest tools;
      parse_tools(v, tools);
      r.tools_json = std::move(tools.tools_json);
    } else {
      throw bad_request("unknown parameter '" + key + "'", key, "unknown_parameter");
    }
  }
  if (have_prompt == r.chat()) {
    throw bad_request("give exactly one of prompt and messages", have_prompt ? "messages" : "prompt",
                      have_prompt ? "invalid_value" : "missing_required_parameter");
  }
  return r;
}

DetokenizeRequest parse_detokenize(std::string_view body) {
  const Json j = body_object(body);
  DetokenizeRequest r;
  bool have_tokens = false;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    const char* k = key.c_str();
    if (key == "model") {
      r.model = get_string(v, k);
    } else if (key == "tokens") {
      if (!v.is_array()) throw bad_request("tokens must be a list of token ids", k);
      r.tokens = token_ids(v, k);
      have_tokens = true;
    } else {
      throw bad_request("unknown parameter '" + key + "'", key, "unknown_parameter");
    }
  }
  if (!have_tokens) throw bad_request("tokens is required", "tokens", "missing_required_parameter");
  return r;
}

}  // namespace kvattn::server
