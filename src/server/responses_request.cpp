#include "server/responses_request.h"

#include <set>
#include <string>

#include "server/api_error.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;

ApiError unsupported(const std::string& message, const std::string& param) {
  return bad_request(message, param, "unsupported_parameter");
}

std::string at(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

// A message's content as chat's: a string, or text parts ({"type": "text", "text"}).
Json message_content(const Json& content, const std::string& path) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    throw bad_request(path + " must be a string or a list of content parts but is " +
                          content.type_name(),
                      path);
  }
  Json parts = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string p = at(path, j);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      throw bad_request(p + " must be an object with a string \"type\"", p);
    }
    const std::string type = part["type"].get<std::string>();
    if (type == "refusal") continue;  // an earlier answer's refusal: no text to render
    if (type != "input_text" && type != "output_text") {
      throw unsupported(p + ".type '" + type +
                            "' is not supported (kvattn reads input_text and output_text parts)",
                        p + ".type");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      throw bad_request(p + ".text must be a string", p + ".text");
    }
    parts.push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return parts;
}

const std::string& string_field(const Json& item, const char* key, const std::string& at) {
  if (!item.contains(key) || !item[key].is_string()) {
    throw bad_request(at + "." + key + " must be a string", at + "." + key);
  }
  return item[key].get_ref<const std::string&>();
}

// A function_call item: a call of the assistant's turn (consecutive calls share one turn,
// as chat's tool_calls list).
void add_function_call(Json& messages, const Json& item, const std::string& at) {
  Json call = {{"id", string_field(item, "call_id", at)},
               {"type", "function"},
               {"function", {{"name", string_field(item, "name", at)},
                             {"arguments", string_field(item, "arguments", at)}}}};
  if (!messages.empty() && messages.back()["role"] == "assistant" &&
      messages.back().contains("tool_calls")) {
    messages.back()["tool_calls"].push_back(std::move(call));
    return;
  }
  messages.push_back({{"role", "assistant"}, {"content", nullptr},
                      {"tool_calls", Json::array({std::move(call)})}});
}

// A function_call_output item: the tool's result for call_id.
Json function_call_output(const Json& item, const std::string& at) {
  if (!item.contains("output") || !(item["output"].is_string() || item["output"].is_array())) {
    throw bad_request(at + ".output must be a string or a list of text parts", at + ".output");
  }
  return {{"role", "tool"}, {"tool_call_id", string_field(item, "call_id", at)},
          {"content", message_content(item["output"], at + ".output")}};
}

// Responses' function tools ({"type": "function", "name", "description", "parameters",
// "strict"}) as chat's ({"type": "function", "function": {...}}).
Json chat_tools(const Json& tools) {
  if (!tools.is_array()) throw bad_request("tools must be a list", "tools");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = at("tools", i);
    const Json& t = tools[i];
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string()) {
      throw bad_request(p + " must be an object with a string \"type\"", p);
    }
    if (t["type"] != "function") {
      throw unsupported(p + ".type '" + t["type"].get<std::string>() +
                            "' is not supported (function tools only: no built-in tools)",
                        p + ".type");
    }
    Json function = Json::object();
    for (const auto& [key, value] : t.items()) {
      if (key != "type") function[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// tool_choice: "auto" | "none" | "required" | {"type": "function", "name"} -> chat's.
Json chat_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name")) {
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  }
  throw bad_request("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": "
                    "\"function\", \"name\": ...} but is " + choice.dump(),
                    "tool_choice");
}

// The input items as chat messages, after the instructions' system message.
Json chat_messages(const Json& input, const Json& instructions) {
  Json messages = Json::array();
  if (instructions.is_string()) {
    messages.push_back({{"role", "system"}, {"content", instructions}});
  } else if (!instructions.is_null()) {
    throw bad_request("instructions must be a string but is " + std::string(instructions.type_name()),
                      "instructions");
  }
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array() || input.empty()) {
    throw bad_request("input must be a string or a non-empty list of messages", "input");
  }
  static const std::set<std::string> roles = {"user", "assistant", "system", "developer"};
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string p = at("input", i);
    if (!item.is_object()) throw bad_request(p + " must be an object", p);
    const std::string type = item.contains("type") && item["type"].is_string()
                                 ? item["type"].get<std::string>()
                                 : "message";
    if (type == "function_call") {
      add_function_call(messages, item, p);
      continue;
    }
    if (type == "function_call_output") {
      messages.push_back(function_call_output(item, p));
      continue;
    }
    if (type != "message") {
      throw unsupported(p + ".type '" + type + "' is not supported (kvattn takes messages, " +
                            "function_call and function_call_output items)",
                        p + ".type");
    }
    if (!item.contains("role") || !item["role"].is_string() ||
        roles.count(item["role"].get<std::string>()) == 0) {
      throw bad_request(p + ".role must be one of user, assistant, system, developer", p + ".role");
    }
    if (!item.contains("content")) throw bad_request(p + ".content is missing", p + ".content");
    for (const auto& [key, _] : item.items()) {
      if (key != "type" && key != "role" && key != "content" && key != "id" && key != "status") {
        throw bad_request(p + "." + key + " is not a field of an input message", p + "." + key);
      }
    }
    messages.push_back({{"role", item["role"]},
                        {"content", message_content(item["content"], p + ".content")}});
  }
  return messages;
}

// text.format -> chat's response_format (none for plain text).
Json response_format(const Json& text, Json& format_out) {
  if (!text.is_object()) throw bad_request("text must be an object", "text");
  for (const auto& [key, _] : text.items()) {
    if (key != "format" && key != "verbosity") {
      throw bad_request("text." + key + " is not supported", "text." + key);
    }
  }
  if (!text.contains("format") || text["format"].is_null()) return nullptr;
  const Json& f = text["format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    throw bad_request("text.format must be an object with a string \"type\"", "text.format");
  }
  format_out = f;
  const std::string type = f["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type != "json_schema") {
    throw bad_request("text.format.type must be text, json_object or json_schema but is '" +
                          type + "'",
                      "text.format.type");
  }
  Json schema = {{"name", f.value("name", "response")}};
  for (const char* key : {"schema", "strict", "description"}) {
    if (f.contains(key)) schema[key] = f[key];
  }
  for (const auto& [key, _] : f.items()) {
    if (key != "type" && key != "name" && key != "schema" && key != "strict" &&
        key != "description") {
      throw bad_request("text.format." + key + " is not a field of a json_schema format",
                        "text.format." + key);
    }
  }
  return {{"type", "json_schema"}, {"json_schema", schema}};
}

// Fields of the Responses API that mean nothing here unless they hold their default.
void check_defaults(const Json& j) {
  const auto expect = [&](const char* key, bool ok, const std::string& what) {
    if (j.contains(key) && !j[key].is_null() && !ok) {
      throw unsupported(std::string(key) + " " + what, key);
    }
  };
  const auto value = [&](const char* key) { return j.contains(key) ? j[key] : Json(); };
  expect("previous_response_id", false,
         "is not supported: kvattn does not store responses (send the conversation as input)");
  expect("conversation", false, "is not supported: kvattn does not store conversations");
  expect("background", value("background") == false, "must be false (no background mode)");
  expect("truncation", value("truncation") == "disabled", "must be \"disabled\"");
  expect("include", value("include").is_array() && value("include").empty(),
         "must be empty (kvattn includes nothing extra)");
  expect("top_logprobs", value("top_logprobs") == 0,
         "must be 0 (log-probabilities on /v1/responses are not supported yet)");
  expect("reasoning",
         value("reasoning").is_object() &&
             (!value("reasoning").contains("effort") || value("reasoning")["effort"].is_null()),
         "effort is not supported (no reasoning models' switch here)");
  expect("prompt", false, "(a stored prompt template) is not supported");
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body) {
  const Json j = parse_body_object(body);
  ResponsesRequest r;
  check_defaults(j);
  if (!j.contains("input")) throw bad_request("input is missing", "input");
  r.instructions = j.contains("instructions") ? j["instructions"] : Json();
  Json chat = {{"messages", chat_messages(j["input"], r.instructions)}};
  // Responses-only fields, translated; theirs or chat's (which checks them) elsewhere.
  static const std::set<std::string> handled = {
      "input", "instructions", "max_output_tokens", "text", "previous_response_id",
      "conversation", "background", "truncation", "include", "tools", "tool_choice",
      "top_logprobs", "reasoning", "prompt", "prompt_cache_key", "safety_identifier",
      "stream_options", "max_tool_calls", "parallel_tool_calls", "store"};
  static const std::set<std::string> chat_only = {
      "messages", "n", "max_tokens", "max_completion_tokens", "response_format", "logprobs",
      "echo", "best_of", "suffix", "functions", "function_call", "modalities", "audio",
      "prediction", "web_search_options"};
  for (const auto& [key, value] : j.items()) {
    if (chat_only.count(key) != 0) {
      throw bad_request("Unrecognized request argument supplied: " + key +
                            " (a chat completions field; /v1/responses does not take it)",
                        key, "unknown_parameter");
    }
    if (handled.count(key) == 0) chat[key] = value;  // model, temperature, stream, seed, ...
  }
  if (j.contains("tools") && !j["tools"].is_null()) {
    r.tools = j["tools"];
    Json tools = chat_tools(j["tools"]);
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    r.tool_choice = j["tool_choice"];
    // Without tools, "auto" and "none" mean the same as no field (OpenAI sends them so).
    if (chat.contains("tools") || (r.tool_choice != "auto" && r.tool_choice != "none")) {
      chat["tool_choice"] = chat_tool_choice(j["tool_choice"]);
    }
  }
  if (j.contains("parallel_tool_calls") && !j["parallel_tool_calls"].is_null()) {
    chat["parallel_tool_calls"] = j["parallel_tool_calls"];
    if (j["parallel_tool_calls"].is_boolean()) r.parallel_tool_calls = j["parallel_tool_calls"];
  }
  if (j.contains("max_tool_calls") && !j["max_tool_calls"].is_null() &&
      !(j["max_tool_calls"].is_number_integer() && j["max_tool_calls"].get<int64_t>() >= 1)) {
    throw bad_request("max_tool_calls must be an integer >= 1", "max_tool_calls");
  }
  if (j.contains("max_output_tokens") && !j["max_output_tokens"].is_null()) {
    const Json& m = j["max_output_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1) {
      throw bad_request("max_output_tokens must be an integer >= 1 but is " + m.dump(),
                        "max_output_tokens");
    }
    r.max_output_tokens = m;
    chat["max_completion_tokens"] = m;
  }
  if (j.contains("text") && !j["text"].is_null()) {
    Json format = response_format(j["text"], r.text_format);
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const Json& o = j["stream_options"];
    if (!o.is_object() || (o.size() > 0 && !(o.size() == 1 && o.contains("include_obfuscation")))) {
      throw bad_request("stream_options may hold include_obfuscation only", "stream_options");
    }
  }
  if (j.contains("store") && !j["store"].is_null() && !j["store"].is_boolean()) {
    throw bad_request("store must be a boolean", "store");
  }
  r.chat = parse_request(chat.dump(), Endpoint::kChat);
  r.chat.max_tokens_field = "max_output_tokens";
  if (j.contains("metadata") && j["metadata"].is_object()) r.metadata = j["metadata"];
  if (j.contains("user")) r.user = j["user"];
  if (j.contains("temperature") && j["temperature"].is_number()) {
    r.temperature = j["temperature"].get<double>();
  }
  if (j.contains("top_p") && j["top_p"].is_number()) r.top_p = j["top_p"].get<double>();
  return r;
}

}  // namespace kvattn::server
