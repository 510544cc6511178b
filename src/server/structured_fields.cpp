#include "server/structured_fields.h"

#include "server/api_error.h"

namespace kvattn::server {
namespace {

using Json = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;

// Sets `out` to one kind, refusing a second one in the same request.
void take(StructuredOutput& out, Kind kind, std::string spec, const std::string& field) {
  if (out.active()) {
    throw bad_request("only one structured output may be asked for (response_format, "
                      "guided_json / guided_regex / guided_choice or structured_outputs)",
                      field);
  }
  out.kind = kind;
  out.spec = std::move(spec);
}

std::string schema_text(const Json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() || v.is_boolean()) return v.dump();
  throw bad_request(field + " must be a JSON schema (an object, or its text) but is " +
                        std::string(v.type_name()),
                    field);
}

std::string text(const Json& v, const std::string& field) {
  if (!v.is_string()) {
    throw bad_request(field + " must be a string but is " + std::string(v.type_name()), field);
  }
  return v.get<std::string>();
}

void choices(StructuredOutput& out, const Json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) {
    throw bad_request(field + " must be a non-empty list of strings", field);
  }
  take(out, Kind::kChoice, "", field);
  for (const Json& c : v) out.choices.push_back(text(c, field));
}

void response_format(StructuredOutput& out, const Json& v) {
  const std::string f = "response_format";
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) {
    throw bad_request("response_format must be an object with a string \"type\"", f);
  }
  const std::string type = v["type"].get<std::string>();
  for (const auto& [key, _] : v.items()) {
    if (key != "type" && !(type == "json_schema" && key == "json_schema")) {
      throw bad_request("response_format: unknown field '" + key + "'", f);
    }
  }
  if (type == "text") return;
  if (type == "json_object") return take(out, Kind::kJsonObject, "", f);
  if (type != "json_schema") {
    throw bad_request("response_format type '" + type +
                          "' is not supported (text, json_object, json_schema)",
                      f, "unsupported_parameter");
  }
  if (!v.contains("json_schema") || !v["json_schema"].is_object()) {
    throw bad_request("response_format json_schema needs a \"json_schema\" object", f);
  }
  const Json& js = v["json_schema"];
  std::string spec = "{}";
  for (const auto& [key, x] : js.items()) {
    if (key == "schema") {
      spec = schema_text(x, "response_format.json_schema.schema");
    } else if (key == "name" || key == "description") {
      (void)text(x, "response_format.json_schema." + key);
    } else if (key == "strict") {
      if (!x.is_boolean() && !x.is_null()) {
        throw bad_request("response_format.json_schema.strict must be a boolean", f);
      }
    } else {
      throw bad_request("response_format.json_schema: unknown field '" + key + "'", f);
    }
  }
  take(out, Kind::kJsonSchema, std::move(spec), f);
}

void structured_outputs(StructuredOutput& out, const Json& v) {
  const std::string f = "structured_outputs";
  if (!v.is_object()) throw bad_request("structured_outputs must be an object", f);
  for (const auto& [key, x] : v.items()) {
    if (x.is_null()) continue;
    const std::string field = f + "." + key;
    if (key == "json") {
      take(out, Kind::kJsonSchema, schema_text(x, field), field);
    } else if (key == "regex") {
      take(out, Kind::kRegex, text(x, field), field);
    } else if (key == "choice") {
      choices(out, x, field);
    } else if (key == "json_object") {
      if (!x.is_boolean()) throw bad_request(field + " must be a boolean", field);
      if (x.get<bool>()) take(out, Kind::kJsonObject, "", field);
    } else if (key == "grammar") {
      take(out, Kind::kGrammar, text(x, field), field);
    } else if (key == "structural_tag") {
      throw bad_request(field + " is not supported by kvattn (json, regex, choice, grammar, "
                        "json_object)",
                        field, "unsupported_parameter");
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties" || key == "whitespace_pattern") {
      // vLLM's backend options; kvattn's grammar has its own whitespace rule and never falls
      // back. Taken when they ask for nothing else.
    } else {
      throw bad_request("structured_outputs: unknown field '" + key + "'", field);
    }
  }
}

}  // namespace

bool parse_structured_field(const std::string& key, const Json& v, StructuredOutput& out) {
  if (key == "response_format") {
    response_format(out, v);
  } else if (key == "structured_outputs") {
    structured_outputs(out, v);
  } else if (key == "guided_json") {
    take(out, Kind::kJsonSchema, schema_text(v, key), key);
  } else if (key == "guided_regex") {
    take(out, Kind::kRegex, text(v, key), key);
  } else if (key == "guided_choice") {
    choices(out, v, key);
  } else if (key == "guided_grammar" || key == "grammar") {  // vLLM's; llama.cpp's server's
    take(out, Kind::kGrammar, text(v, key), key);
  } else if (key == "json_schema") {  // llama.cpp's server's
    take(out, Kind::kJsonSchema, schema_text(v, key), key);
  } else if (key == "guided_decoding_backend") {
    (void)text(v, key);
  } else if (key == "guided_whitespace_pattern") {
    throw bad_request("guided_whitespace_pattern is not supported by kvattn", key,
                      "unsupported_parameter");
  } else {
    return false;
  }
  return true;
}

}  // namespace kvattn::server
