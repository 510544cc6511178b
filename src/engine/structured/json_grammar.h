// Internal: grammars for JSON output: any JSON object (OpenAI's response_format json_object) and
// the values a JSON Schema describes (response_format json_schema, vLLM's guided_json).
//
// Supported schema keywords (others that constrain values are refused by name, so that no output
// can silently break the schema; annotations are ignored): type (one or a list), enum, const,
// anyOf / oneOf (as alternatives), allOf of one schema, $ref into #/$defs, #/definitions or #
// (recursion allowed), properties / required / additionalProperties (absent = false where
// properties are declared: only those, in their declared order, as OpenAI's strict mode and
// xgrammar do; a bare {"type": "object"} is any object), items / prefixItems / minItems /
// maxItems, minLength / maxLength / pattern (regex_grammar.h; a search, as the spec says:
// unanchored sides allow any text; the string's characters stay those JSON writes unescaped, so
// '"', '\' and controls are left out), nullable (OpenAPI), format (an annotation: not enforced),
// and minimum / maximum / exclusiveMinimum / exclusiveMaximum (numeric_range.h; draft 4's
// boolean exclusive forms too; bounds of numbers must be integers, bounded numbers are written
// without exponent). A schema with only such keywords means a number; one with only string
// keywords a string (JSON Schema lets other types through; kvattn writes the constrained type).
// Annotations: title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, $defs, definitions.
//
// Layout: whitespace between tokens is "", " " or a newline and up to 20 spaces or tabs
// (llama.cpp's), so a model cannot loop on blank space; integers and fractions have at most 16
// digits (llama.cpp's bounds), exponents at most 2 (every number a finite double); strings are
// well-formed UTF-8 with JSON's escapes (no lone surrogates). A leading whitespace run is allowed
// before the value, nothing after it.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

std::shared_ptr<const Grammar> json_object_grammar();
// `schema` is the schema's JSON text; throws kvattn::Error naming what is not supported or
// not valid (the path to it inside the schema, e.g. "properties.age.minimum").
std::shared_ptr<const Grammar> json_schema_grammar(std::string_view schema);
std::shared_ptr<const Grammar> json_schema_grammar_from(const nlohmann::ordered_json& schema);
// Exactly one of `choices` (vLLM's guided_choice), byte for byte.
std::shared_ptr<const Grammar> choice_grammar(const std::vector<std::string>& choices);

}  // namespace kvattn::structured
