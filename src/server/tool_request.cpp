#include "server/tool_request.h"

#include <cctype>
#include <set>

#include "server/api_error.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;

std::string type_name(const Json& j) { return j.type_name(); }

// OpenAI's function names: ^[a-zA-Z0-9_-]{1,64}$.
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (const char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

const std::string& string_field(const Json& obj, const char* key, const std::string& at,
                                const char* param) {
  if (!obj.contains(key)) throw bad_request(at + "." + key + " is missing", param);
  const Json& v = obj[key];
  if (!v.is_string()) {
    throw bad_request(at + "." + key + " must be a string but is " + type_name(v), param);
  }
  return v.get_ref<const std::string&>();
}

void check_type_function(const Json& obj, const std::string& at, const char* param) {
  if (!obj.contains("type")) throw bad_request(at + ".type is missing", param);
  if (obj["type"] != "function") {
    throw bad_request(at + ".type must be \"function\" but is " + obj["type"].dump(), param);
  }
}

// Rewrites the local references ("#...") of a schema placed at `base` (a JSON pointer) of a
// larger schema, so that they still name their targets. Values of keywords that hold data,
// not schemas, are left alone.
void rebase_refs(Json& s, const std::string& base) {
  if (s.is_array()) {
    for (Json& x : s) rebase_refs(x, base);
    return;
  }
  if (!s.is_object()) return;
  for (auto& [key, v] : s.items()) {
    if (key == "const" || key == "enum" || key == "default" || key == "examples") continue;
    if (key == "$ref" && v.is_string() && v.get<std::string>().starts_with("#")) {
      v = "#" + base + v.get<std::string>().substr(1);
    } else {
      rebase_refs(v, base);
    }
  }
}

Json parameters_or_empty(const ToolSpec& t) {
  return t.parameters.is_null() ? Json{{"type", "object"}, {"properties", Json::object()}}
                                : t.parameters;
}

}  // namespace

void parse_tools(const Json& v, ToolRequest& out) {
  const char* k = "tools";
  if (!v.is_array()) throw bad_request("tools must be a list but is " + type_name(v), k);
  if (v.size() > kMaxTools) {
    throw bad_request("tools holds " + std::to_string(v.size()) + " tools; at most " +
                          std::to_string(kMaxTools),
                      k);
  }
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& t = v[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_request(at + " must be an object but is " + type_name(t), k);
    for (const auto& [key, _] : t.items()) {
      if (key != "type" && key != "function") {
        throw bad_request(at + ": unknown field '" + key + "'", k);
      }
    }
    check_type_function(t, at, k);
    if (!t.contains("function") || !t["function"].is_object()) {
      throw bad_request(at + ".function must be an object but is " +
                            (t.contains("function") ? type_name(t["function"]) : "missing"),
                        k);
    }
    const Json& f = t["function"];
    const std::string fat = at + ".function";
    ToolSpec spec;
    spec.name = string_field(f, "name", fat, k);
    if (!valid_name(spec.name)) {
      throw bad_request(fat + ".name must match ^[a-zA-Z0-9_-]{1,64}$ but is \"" + spec.name +
                            "\"",
                        k);
    }
    if (!names.insert(spec.name).second) {
      throw bad_request(fat + ".name \"" + spec.name + "\" names two tools; names must be unique",
                        k);
    }
    for (const auto& [key, x] : f.items()) {
      if (key == "name") continue;
      if (key == "description") {
        if (!x.is_string() && !x.is_null()) {
          throw bad_request(fat + ".description must be a string but is " + type_name(x), k);
        }
      } else if (key == "parameters") {
        if (!x.is_object() && !x.is_null()) {
          throw bad_request(fat + ".parameters must be a JSON Schema object but is " +
                                type_name(x),
                            k);
        }
        spec.parameters = x;
      } else if (key == "strict") {
        if (!x.is_boolean() && !x.is_null()) {
          throw bad_request(fat + ".strict must be a boolean but is " + type_name(x), k);
        }
      } else {
        throw bad_request(fat + ": unknown field '" + key + "'", k);
      }
    }
    out.tools.push_back(std::move(spec));
  }
  if (!out.tools.empty()) out.tools_json = v.dump();
}

void parse_tool_choice(const Json& v, ToolRequest& out) {
  const char* k = "tool_choice";
  out.choice_given = true;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "none") out.choice = ToolRequest::Choice::kNone;
    else if (s == "auto") out.choice = ToolRequest::Choice::kAuto;
    else if (s == "required") out.choice = ToolRequest::Choice::kRequired;
    else {
      throw bad_request("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                        "\"function\", \"function\": {\"name\": ...}} but is \"" + s + "\"",
                        k);
    }
    return;
  }
  if (!v.is_object()) {
    throw bad_request("tool_choice must be a string or an object but is " + type_name(v), k);
  }
  for (const auto& [key, _] : v.items()) {
    if (key != "type" && key != "function") {
      throw bad_request("tool_choice: unknown field '" + key + "'", k);
    }
  }
  check_type_function(v, "tool_choice", k);
  if (!v.contains("function") || !v["function"].is_object()) {
    throw bad_request("tool_choice.function must be an object with the function's name", k);
  }
  out.named = string_field(v["function"], "name", "tool_choice.function", k);
  out.choice = ToolRequest::Choice::kNamed;
}

void finish_tool_request(ToolRequest& t, const StructuredOutput& structured) {
  using Choice = ToolRequest::Choice;
  const char* k = "tool_choice";
  if (!t.choice_given) {
    t.choice = t.tools.empty() ? Choice::kNone : Choice::kAuto;
    return;
  }
  if (t.tools.empty() && t.choice != Choice::kNone) {
    throw bad_request("tool_choice other than \"none\" needs tools (no tools were given)", k);
  }
  if (t.choice == Choice::kNamed) {
    bool found = false;
    for (const ToolSpec& s : t.tools) found = found || s.name == t.named;
    if (!found) {
      std::string names;
      for (const ToolSpec& s : t.tools) names += (names.empty() ? "" : ", ") + s.name;
      throw bad_request("tool_choice names the function \"" + t.named +
                            "\", which is not among the tools (" + names + ")",
                        k);
    }
  }
  if ((t.choice == Choice::kNamed || t.choice == Choice::kRequired) && structured.active()) {
    throw bad_request("tool_choice \"required\" or a named function constrains the output to "
                      "the call; it cannot be combined with response_format / guided_* / "
                      "structured_outputs",
                      k);
  }
}

std::vector<ChatToolCall> parse_message_tool_calls(const Json& v, const std::string& at) {
  const char* k = "messages";
  if (!v.is_array()) {
    throw bad_request(at + ".tool_calls must be a list but is " + type_name(v), k);
  }
  if (v.size() > kMaxToolCalls) {
    throw bad_request(at + ".tool_calls holds " + std::to_string(v.size()) + " calls; at most " +
                          std::to_string(kMaxToolCalls),
                      k);
  }
  std::vector<ChatToolCall> calls;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& c = v[i];
    const std::string cat = at + ".tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object()) throw bad_request(cat + " must be an object but is " + type_name(c), k);
    for (const auto& [key, _] : c.items()) {
      if (key != "id" && key != "type" && key != "function") {
        throw bad_request(cat + ": unknown field '" + key + "'", k);
      }
    }
    check_type_function(c, cat, k);
    ChatToolCall call;
    call.id = string_field(c, "id", cat, k);
    if (!c.contains("function") || !c["function"].is_object()) {
      throw bad_request(cat + ".function must be an object with name and arguments", k);
    }
    const Json& f = c["function"];
    for (const auto& [key, _] : f.items()) {
      if (key != "name" && key != "arguments") {
        throw bad_request(cat + ".function: unknown field '" + key + "'", k);
      }
    }
    call.name = string_field(f, "name", cat + ".function", k);
    call.arguments = string_field(f, "arguments", cat + ".function", k);
    // vLLM parses the arguments (templates render them as an object): they must be JSON.
    if (!Json::accept(call.arguments)) {
      throw bad_request(cat + ".function.arguments must be a JSON text but is \"" +
                            call.arguments.substr(0, 64) + "\"",
                        k);
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

StructuredOutput tool_constraint(const ToolRequest& t) {
  StructuredOutput out;
  out.kind = StructuredOutput::Kind::kJsonSchema;
  if (t.choice == ToolRequest::Choice::kNamed) {
    for (const ToolSpec& s : t.tools) {
      if (s.name == t.named) out.spec = parameters_or_empty(s).dump();
    }
    return out;
  }
  Json any_of = Json::array();
  for (size_t i = 0; i < t.tools.size(); ++i) {
    Json params = parameters_or_empty(t.tools[i]);
    rebase_refs(params, "/items/anyOf/" + std::to_string(i) + "/properties/parameters");
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"const", t.tools[i].name}}},
                                      {"parameters", std::move(params)}}},
                      {"required", {"name", "parameters"}},
                      {"additionalProperties", false}});
  }
  Json schema = {{"type", "array"}, {"minItems", 1}};
  if (!t.parallel) schema["maxItems"] = 1;
  schema["items"] = {{"anyOf", std::move(any_of)}};
  out.spec = schema.dump();
  return out;
}

}  // namespace kvattn::server
