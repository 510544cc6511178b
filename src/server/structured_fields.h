// Parses the request fields that ask for structured output into SamplingParams::structured,
// or throws ApiError (400) naming the field:
//   response_format    OpenAI's {"type": "text" | "json_object" | "json_schema",
//                      "json_schema": {"name", "schema", "strict", "description"}} (chat and,
//                      as vLLM takes it, completions); a json_schema without "schema" allows any
//                      JSON value;
//   guided_json, guided_regex, guided_choice, guided_grammar    vLLM's guided decoding (a
//                      schema as an object or its text; a regex; a list of strings; a GBNF
//                      grammar, as vLLM's xgrammar backend takes), with guided_decoding_backend
//                      taken and ignored;
//   structured_outputs vLLM's newer form: {"json" | "regex" | "choice" | "grammar" |
//                      "json_object": true};
//   grammar, json_schema    llama.cpp's server's fields (GBNF text; a schema).
// One kind per request. Structural tags and guided_whitespace_pattern are refused as
// unsupported. The schema or regex itself is checked where it is
// compiled (the engine), which answers 400 with what it cannot enforce.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kvattn/engine/sampler.h"

namespace kvattn::server {

// True when `key` is one of the fields above (and `out` took it); a second structure in the
// same request is refused.
bool parse_structured_field(const std::string& key, const nlohmann::ordered_json& v,
                            StructuredOutput& out);

}  // namespace kvattn::server
