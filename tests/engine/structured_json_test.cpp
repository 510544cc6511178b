// Structured output grammars (src/engine/structured/): the JSON object grammar and JSON Schema
// grammars accept what they should, every prefix of it, and nothing else; random sentences
// drawn from the grammars parse as JSON and satisfy their schema (a small validator of the
// supported keywords, written here from the JSON Schema definitions); unsupported or invalid
// schemas are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

using Json = nlohmann::ordered_json;

// Whole sentence: every byte accepted and the end reached.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.can_end();
}

// Every proper prefix is accepted and can go on.
void expect_prefixes(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  for (size_t n = 0; n < text.size(); ++n) {
    Matcher m(g);
    ASSERT_TRUE(m.advance(text.substr(0, n))) << "prefix " << n << " of " << text;
    EXPECT_TRUE(m.can_continue()) << "prefix " << n << " of " << text;
  }
}

TEST(JsonGrammar, ObjectAcceptsJsonObjects) {
  const auto g = json_object_grammar();
  for (const std::string doc : {
           R"({})", R"({"a":1})", R"( {"a": 1, "b": [true, false, null, "x"], "c": {}})",
           "{\n  \"k\": -0.5e+10,\n  \"n\": [\n    1,\n    2\n  ]\n}",
           R"({"esc": "q\" b\\ \/ \n \u00e9 \uD83D\uDE00"})", "{\"utf8\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
           R"({"nested": {"deep": [[[]], [{}], {"x": [1.25]}]}})", R"({"big": 1234567890123456})"}) {
    EXPECT_TRUE(accepts(g, doc)) << doc;
    expect_prefixes(g, doc);
  }
}

TEST(JsonGrammar, ObjectRejectsEverythingElse) {
  const auto g = json_object_grammar();
  for (const std::string doc : {
           R"([])", R"("s")", R"(1)", R"({"a" 1})", R"({"a":1,})", R"({,})", R"({} )", R"({}x)",
           R"({'a':1})", R"({"a":01})", R"({"a":1.})", R"({"a":.5})", R"({"a":+1})",
           R"({"a":tru})", R"({"a":"\x"})", R"({"a":"\uD800"})", R"({"a":"\uDC00\uD800"})", "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}",
           "{\"a\":\"\xc3\"}", R"({"big": 12345678901234567})", "{\n\n\n}", R"({"a": 1e100})",
           "{                                                          }"}) {
    EXPECT_FALSE(accepts(g, doc)) << doc;
  }
}

// --- A validator of the supported keywords, from the JSON Schema definitions. ---
bool valid(const Json& v, const Json& s, const Json& root);

bool valid_typed(const Json& v, const std::string& type, const Json& s, const Json& root) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer" || type == "number") {
    if (type == "integer" ? !v.is_number_integer() : !v.is_number()) return false;
    const double x = v.get<double>();
    const bool draft4_min = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean();
    const bool draft4_max = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean();
    if (s.contains("minimum")) {
      const double m = s["minimum"].get<double>();
      if (x < m || (draft4_min && s["exclusiveMinimum"].get<bool>() && x == m)) return false;
    }
    if (s.contains("maximum")) {
      const double m = s["maximum"].get<double>();
      if (x > m || (draft4_max && s["exclusiveMaximum"].get<bool>() && x == m)) return false;
    }
    if (!draft4_min && s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>())
      return false;
    if (!draft4_max && s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>())
      return false;
    return true;
  }
  if (type == "string") {
    if (!v.is_string()) return false;
    // Length in characters: count UTF-8 lead bytes.
    int64_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xc0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) return false;
    const auto n = static_cast<int64_t>(v.size());
    if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return false;
    if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return false;
    size_t k = 0;
    if (s.contains("prefixItems")) {
      for (; k < s["prefixItems"].size() && k < v.size(); ++k) {
        if (!valid(v[k], s["prefixItems"][k], root)) return false;
      }
    }
    for (; k < v.size(); ++k) {
      if (s.contains("items") && !valid(v[k], s["items"], root)) return false;
    }
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return false;
    const Json props = s.value("properties", Json::object());
    for (const auto& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(x, props[k], root)) return false;
      } else {
        // kvattn's default: strict where properties are declared, any member where none are.
        const Json extra = s.value("additionalProperties", Json(!s.contains("properties")));
        if (!valid(x, extra, root)) return false;
      }
    }
    return true;
  }
  return false;
}

bool valid(const Json& v, const Json& s, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.value("nullable", false) && v.is_null()) return true;
  if (s.contains("$ref")) {
    return valid(v, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const auto& e : s["enum"]) {
      if (v == e) return true;
    }
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    for (const auto& sub : s[key]) {
      if (valid(v, sub, root)) return true;
    }
    return false;
  }
  if (!s.contains("type")) return true;
  if (s["type"].is_string()) return valid_typed(v, s["type"].get<std::string>(), s, root);
  for (const auto& t : s["type"]) {
    if (valid_typed(v, t.get<std::string>(), s, root)) return true;
  }
  return false;
}

// A random sentence of the grammar: random allowed bytes (biased toward ending and toward
// structure), at most `limit` bytes; empty when no end was reached.
std::string random_sentence(const std::shared_ptr<const Grammar>& g, std::mt19937& rng,
                            size_t limit) {
  Matcher m(g);
  std::string out;
  while (out.size() < limit) {
    if (m.can_end() && (!m.can_continue() || rng() % 8 == 0)) return out;
    std::vector<uint8_t> next;
    for (int b = 0; b < 256; ++b) {
      Matcher t = m;
      if (t.advance(std::string(1, static_cast<char>(b)))) next.push_back(static_cast<uint8_t>(b));
    }
    if (next.empty()) return {};
    // Prefer structural bytes so that walks close their brackets and strings.
    std::vector<uint8_t> closing;
    for (uint8_t b : next) {
      if (b == '"' || b == '}' || b == ']' || b == ',' || b == ':') closing.push_back(b);
    }
    const auto& pool = !closing.empty() && rng() % 3 == 0 ? closing : next;
    const uint8_t b = pool[rng() % pool.size()];
    m.advance(std::string(1, static_cast<char>(b)));
    out.push_back(static_cast<char>(b));
  }
  return {};
}

const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array",
        "items": {"enum": ["a", "b", 3, null]}, "maxItems": 3}}, "required": ["name"]})",
    R"({"type": "array", "items": {"type": ["integer", "null", "boolean"]}, "minItems": 1,
        "maxItems": 4})",
    R"({"anyOf": [{"type": "string", "minLength": 2, "maxLength": 3}, {"const": {"k": [1, 2]}},
        {"type": "number", "minimum": 0}]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties":
        {"type": "integer", "exclusiveMinimum": 0}})",
    R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}, {"type": "null"}],
        "items": {"type": "integer", "minimum": 1}, "maxItems": 4})",
    R"({"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": -12, "maximum": 250},
        {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1}, {"type": "number",
        "minimum": 99, "maximum": 100}, {"type": "integer", "exclusiveMaximum": -7.5}]},
        "maxItems": 3})",
    R"({"type": "object", "properties": {"x": {"type": "string", "nullable": true, "maxLength": 1},
        "y": {"allOf": [{"type": "boolean"}]}, "z": {"oneOf": [{"type": "integer"},
        {"type": "array", "items": false}]}}, "required": ["y", "z"]})",
};

TEST(JsonSchemaGrammar, RandomSentencesParseAndSatisfyTheSchema) {
  std::mt19937 rng(11);
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    const auto g = json_schema_grammar(text);
    int whole = 0;
    for (int trial = 0; trial < 300 && whole < 60; ++trial) {
      const std::string s = random_sentence(g, rng, 160);
      if (s.empty()) continue;
      ++whole;
      Json v;
      ASSERT_NO_THROW(v = Json::parse(s)) << text << "\n" << s;
      EXPECT_TRUE(valid(v, schema, schema)) << text << "\n" << s;
      expect_prefixes(g, s);
    }
    EXPECT_GE(whole, 20) << "too few random sentences ended for " << text;
  }
}

TEST(JsonSchemaGrammar, ObjectsFollowTheSchema) {
  const auto g = json_schema_grammar(kSchemas[0]);
  EXPECT_TRUE(accepts(g, R"({"name": "bo"})"));
  EXPECT_TRUE(accepts(g, R"({"name":"bo","age":0,"tags":["a",3,null]})"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"bo\",\n  \"tags\": []\n}"));
  EXPECT_FALSE(accepts(g, R"({})"));                          // name is required
  EXPECT_FALSE(accepts(g, R"({"age": 3, "name": "bo"})"));    // declared order
  EXPECT_FALSE(accepts(g, R"({"name": "bo", "x": 1})"));      // no other properties
  EXPECT_FALSE(accepts(g, R"({"name": "toolong"})"));         // maxLength 6
  EXPECT_FALSE(accepts(g, R"({"name": "bo", "age": -1})"));   // minimum 0
  EXPECT_FALSE(accepts(g, R"({"name": "bo", "age": 1.5})"));  // integer
  EXPECT_FALSE(accepts(g, R"({"name": "bo", "tags": ["c"]})"));
  EXPECT_FALSE(accepts(g, R"({"name": "bo", "tags": ["a","a","a","a"]})"));
  const auto tree = json_schema_grammar(kSchemas[3]);
  EXPECT_TRUE(accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v": 1, "kids": [{"kids": []}]})"));
  const auto tuple = json_schema_grammar(kSchemas[5]);
  EXPECT_TRUE(accepts(tuple, R"([])"));
  EXPECT_TRUE(accepts(tuple, R"(["ab"])"));
  EXPECT_TRUE(accepts(tuple, R"(["ab", null, 1, 2])"));
  EXPECT_FALSE(accepts(tuple, R"(["ab", null, 1, 2, 3])"));
  EXPECT_FALSE(accepts(tuple, R"(["ab", 1])"));
  EXPECT_FALSE(accepts(tuple, R"(["ab", null, 0])"));
}

TEST(JsonSchemaGrammar, BareObjectsTakeAnyMembersDeclaredOnesOnlyTheirs) {
  const auto bare = json_schema_grammar(R"({"type": "object"})");
  EXPECT_TRUE(accepts(bare, R"({"anything": [1, {"x": null}], "b": "c"})"));
  EXPECT_TRUE(accepts(bare, R"({})"));
  const auto nested = json_schema_grammar(R"({"type": "object", "properties": {"meta":
      {"type": "object"}}, "required": ["meta"]})");
  EXPECT_TRUE(accepts(nested, R"({"meta": {"k": 1}})"));
  EXPECT_FALSE(accepts(nested, R"({"meta": {}, "other": 1})"));
  const auto draft4 = json_schema_grammar(R"({"type": "integer", "minimum": 0,
      "exclusiveMinimum": true})");
  EXPECT_TRUE(accepts(draft4, "7"));
  EXPECT_FALSE(accepts(draft4, "0"));
}

TEST(JsonSchemaGrammar, PatternIsASearchInsideAJsonString) {
  const auto full = json_schema_grammar(R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})");
  EXPECT_TRUE(accepts(full, R"("ab-12")"));
  EXPECT_FALSE(accepts(full, R"("ab-1")"));
  EXPECT_FALSE(accepts(full, R"("1ab-12")"));
  const auto search = json_schema_grammar(R"({"type": "string", "pattern": "\\d{3}"})");
  EXPECT_TRUE(accepts(search, R"("x123y")"));
  EXPECT_TRUE(accepts(search, R"("123")"));
  EXPECT_FALSE(accepts(search, R"("12")"));
  const auto head = json_schema_grammar(R"({"type": "string", "pattern": "^ab"})");
  EXPECT_TRUE(accepts(head, R"("abc")"));
  EXPECT_FALSE(accepts(head, R"("cab")"));
  // Characters JSON must escape are left out of the pattern's strings.
  const auto any = json_schema_grammar(R"({"type": "string", "pattern": "^.*$"})");
  EXPECT_TRUE(accepts(any, "\"caf\xc3\xa9 ok\""));
  EXPECT_FALSE(accepts(any, R"("a\"b")"));
  EXPECT_FALSE(accepts(any, "\"a\tb\""));
}

TEST(JsonSchemaGrammar, EmptySchemaIsAnyValueAndChoicesAreExact) {
  const auto any = json_schema_grammar("{}");
  for (const std::string doc : {"1", "\"x\"", "[1, {}]", "null", " {\"a\": true}"}) {
    EXPECT_TRUE(accepts(any, doc)) << doc;
  }
  const auto c = choice_grammar({"yes", "no", "not sure"});
  EXPECT_TRUE(accepts(c, "no"));
  EXPECT_TRUE(accepts(c, "not sure"));
  EXPECT_FALSE(accepts(c, "not"));
  EXPECT_FALSE(accepts(c, "yes "));
  Matcher m(c);
  ASSERT_TRUE(m.advance("no"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.can_continue());  // "not sure" goes on
}

void expect_refused(const std::string& schema, const std::string& words) {
  try {
    json_schema_grammar(schema);
    ADD_FAILURE() << "accepted: " << schema;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos)
        << "message: " << e.what() << "\nexpected to name: " << words;
  }
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotEnforceByName) {
  expect_refused(R"({"type": "object", "properties": {"p": {"type": "number", "maximum": 0.5}}})",
                 "properties.p.maximum 0.5");
  expect_refused(R"({"type": "integer", "minimum": 5, "exclusiveMaximum": 5})", "allow no integer");
  expect_refused(R"({"type": "number", "exclusiveMinimum": true})", "needs minimum");
  expect_refused(R"({"type": "integer", "multipleOf": 5})", "multipleOf");
  expect_refused(R"({"type": "array", "uniqueItems": true})", "uniqueItems");
  expect_refused(R"({"type": "strnig"})", "'strnig'");
  expect_refused(R"({"type": "string", "maxLength": -1})", "maxLength");
  expect_refused(R"({"type": "string", "minLength": 3, "maxLength": 2})", "below minLength");
  expect_refused(R"({"$ref": "#/$defs/missing"})", "names nothing");
  expect_refused(R"({"$ref": "https://example.com/s.json"})", "only references inside");
  expect_refused(R"({"$ref": "#"})", "left-recursive");
  expect_refused(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "exactly one");
  expect_refused("false", "allows no value");
  expect_refused("{\"type\": ", "not valid JSON");
  expect_refused("[1]", "must be an object or a boolean");
  std::string deep = "{}";
  for (int i = 0; i < 80; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  expect_refused(deep, "nested more than");
  expect_refused(R"({"type": "string", "maxLength": 100000000})", "too large");
}

}  // namespace
}  // namespace kvattn::structured
