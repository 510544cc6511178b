#include "engine/structured/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "engine/structured/numeric_range.h"
#include "engine/structured/regex_grammar.h"
#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

using Json = nlohmann::ordered_json;
using Symbol = GrammarBuilder::Symbol;

constexpr int kMaxDepth = 64;       // nested schemas (and $ref chains) followed
constexpr int64_t kMaxDigits = 16;  // llama.cpp's bound on integer and fraction digits

// The building blocks of JSON text, made once per grammar.
class JsonText {
 public:
  explicit JsonText(GrammarBuilder& b) : b_(b) {}

  Symbol ws() {
    if (!ws_) {
      ws_ = b_.choice(
          {b_.empty(), b_.byte(' '), b_.sequence({b_.byte('\n'), b_.repeat(blank(), 0, 20)})});
    }
    return *ws_;
  }
  Symbol sep() {  // between members and items
    if (!sep_) sep_ = b_.sequence({ws(), b_.byte(','), ws()});
    return *sep_;
  }
  // One character of a JSON string's body: printable ASCII but '"' and '\', an escape, or a
  // whole UTF-8 sequence.
  Symbol string_char() {
    if (!char_) {
      ByteSet plain;
      for (int c = 0x20; c < 0x80; ++c) plain.set(static_cast<size_t>(c));
      plain.reset('"');
      plain.reset('\\');
      // \uXXXX: a code point outside the surrogates, or a high and a low surrogate in a
      // pair (strict parsers refuse a lone surrogate).
      const Symbol hex = b_.bytes(hex_set());
      const Symbol d = b_.bytes(set_of("dD"));
      const Symbol single =
          b_.choice({b_.sequence({b_.bytes(set_of("0123456789abceABCEfF")), hex, hex, hex}),
                     b_.sequence({d, b_.byte_range('0', '7'), hex, hex})});
      const Symbol pair = b_.sequence({d, b_.bytes(set_of("89abAB")), hex, hex, b_.literal("\\u"),
                                       d, b_.bytes(set_of("cdefCDEF")), hex, hex});
      const Symbol escape = b_.sequence(
          {b_.byte('\\'), b_.choice({b_.bytes(set_of("\"\\/bfnrt")),
                                     b_.sequence({b_.byte('u'), b_.choice({single, pair})})})});
      char_ = b_.choice({b_.bytes(plain), escape, utf8_multibyte()});
    }
    return *char_;
  }
  // Unbounded strings share one rule, so that token masks computed inside one string serve
  // every other (token_constraint.h caches them by grammar position).
  Symbol string(int64_t min, int64_t max) {
    if (min == 0 && max < 0 && any_string_) return *any_string_;
    const Symbol s = b_.sequence({b_.byte('"'), b_.repeat(string_char(), min, max), b_.byte('"')});
    if (min == 0 && max < 0) any_string_ = s;
    return s;
  }
  // JSON's integers: 0 or [1-9] then up to 15 digits, signed.
  Symbol integer() {
    const Symbol lead =
        b_.sequence({b_.byte_range('1', '9'), b_.repeat(digit(), 0, kMaxDigits - 1)});
    return b_.sequence({b_.optional(b_.byte('-')), b_.choice({b_.byte('0'), lead})});
  }
  Symbol number() {
    const Symbol frac = b_.sequence({b_.byte('.'), b_.repeat(digit(), 1, kMaxDigits)});
    // Exponents of at most two digits: every such number is a finite double, which strict
    // parsers (nlohmann, Go, Rust's serde) require.
    const Symbol exp = b_.sequence(
        {b_.bytes(set_of("eE")), b_.optional(b_.bytes(set_of("+-"))), b_.repeat(digit(), 1, 2)});
    return b_.sequence({integer(), b_.optional(frac), b_.optional(exp)});
  }
  Symbol boolean() { return b_.choice({b_.literal("true"), b_.literal("false")}); }
  // "[" ws (item (sep item){min-1,max-1})? ws "]"
  Symbol list(Symbol item, int64_t min, int64_t max) {
    Symbol items = b_.sequence({item, b_.repeat(b_.sequence({sep(), item}), min > 0 ? min - 1 : 0,
                                                max < 0 ? -1 : max - 1)});
    if (min == 0) items = b_.optional(items);
    if (max == 0) items = b_.empty();
    return b_.sequence({b_.byte('['), ws(), items, ws(), b_.byte(']')});
  }
  // Any JSON value.
  Symbol value() {
    if (!value_) {
      const int32_t v = b_.declare("value");
      value_ = b_.ref(v);
      const Symbol member = b_.sequence({string(0, -1), ws(), b_.byte(':'), ws(), *value_});
      b_.define(v, b_.choice({object_of(member), list(*value_, 0, -1), string(0, -1), number(),
                              boolean(), b_.literal("null")}));
    }
    return *value_;
  }
  // "{" ws (member (sep member)*)? ws "}"
  Symbol object_of(Symbol member) {
    return b_.sequence({b_.byte('{'), ws(),
                        b_.optional(b_.sequence({member, b_.star(b_.sequence({sep(), member}))})),
                        ws(), b_.byte('}')});
  }
  Symbol any_object() {
    return object_of(b_.sequence({string(0, -1), ws(), b_.byte(':'), ws(), value()}));
  }

 private:
  static ByteSet set_of(std::string_view bytes) {
    ByteSet s;
    for (char c : bytes) s.set(static_cast<uint8_t>(c));
    return s;
  }
  static ByteSet hex_set() { return set_of("0123456789abcdefABCDEF"); }
  Symbol digit() { return b_.byte_range('0', '9'); }
  Symbol blank() { return b_.bytes(set_of(" \t")); }
  // Well-formed UTF-8 of two to four bytes (Unicode's table 3-7: no overlong forms, no
  // surrogates, nothing past U+10FFFF).
  Symbol utf8_multibyte() {
    const Symbol c = b_.byte_range(0x80, 0xbf);
    const auto r = [&](int lo, int hi) {
      return b_.byte_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    };
    return b_.choice(
        {b_.sequence({r(0xc2, 0xdf), c}), b_.sequence({r(0xe0, 0xe0), r(0xa0, 0xbf), c}),
         b_.sequence({r(0xe1, 0xec), c, c}), b_.sequence({r(0xed, 0xed), r(0x80, 0x9f), c}),
         b_.sequence({r(0xee, 0xef), c, c}), b_.sequence({r(0xf0, 0xf0), r(0x90, 0xbf), c, c}),
         b_.sequence({r(0xf1, 0xf3), c, c, c}), b_.sequence({r(0xf4, 0xf4), r(0x80, 0x8f), c, c})});
  }

  GrammarBuilder& b_;
  std::optional<Symbol> ws_, sep_, char_, value_, any_string_;
};

// JSON Schema's `pattern` is a search, not a full match: a side without its anchor (^ or $)
// may have any text there.
std::string search_pattern(const std::string& p) {
  const bool head = !p.empty() && p.front() == '^';
  // A trailing $ anchors unless escaped (an odd run of backslashes before it).
  size_t slashes = 0;
  while (p.size() >= slashes + 2 && p[p.size() - 2 - slashes] == '\\') ++slashes;
  const bool tail = !p.empty() && p.back() == '$' && slashes % 2 == 0 && (p.size() > 1 || !head);
  const std::string core = p.substr(head ? 1 : 0, p.size() - (head ? 1 : 0) - (tail ? 1 : 0));
  return (head ? "" : "(?:.*)") + ("(?:" + core + ")") + (tail ? "" : "(?:.*)");
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {
      "title",      "description", "default",   "examples", "$schema",     "$id",   "$comment",
      "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "format"};
  return k;
}
const std::set<std::string>& handled() {
  static const std::set<std::string> k = {"type",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "nullable",
                                          "minimum",
                                          "exclusiveMinimum",
                                          "maximum",
                                          "exclusiveMaximum"};
  return k;
}

// Walks a schema, building the symbol of the JSON text it allows.
class SchemaGrammar {
 public:
  SchemaGrammar(GrammarBuilder& b, const Json& root) : b_(b), text_(b), root_(root) {}

  Symbol visit(const Json& s, const std::string& path, int depth) {
    const std::string at = path.empty() ? "the schema" : "'" + path + "'";
    KVATTN_CHECK(depth <= kMaxDepth, "json_schema: ", at, " is nested more than ", kMaxDepth,
                 " levels deep");
    if (s.is_boolean()) {
      KVATTN_CHECK(s.get<bool>(), "json_schema: ", at, " is false: it allows no value");
      return text_.value();
    }
    KVATTN_CHECK(s.is_object(), "json_schema: ", at, " must be an object or a boolean, not ",
                 s.type_name());
    std::vector<std::string> validation;  // the keys that constrain values
    for (const auto& [key, _] : s.items()) {
      if (annotations().count(key)) continue;
      KVATTN_CHECK(handled().count(key), "json_schema: ", join(path, key),
                   " is not supported (supported: type, enum, const, anyOf, oneOf, allOf of one, "
                   "$ref, properties, required, additionalProperties, items, prefixItems, "
                   "minItems, maxItems, minLength, maxLength, pattern, nullable, minimum, maximum, "
                   "exclusiveMinimum, exclusiveMaximum)");
      validation.push_back(key);
    }
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) {
      Json rest = s;
      rest.erase("nullable");
      return b_.choice({visit(rest, path, depth + 1), b_.literal("null")});
    }
    for (const char* alone : {"$ref", "anyOf", "oneOf", "allOf", "const", "enum"}) {
      if (!s.contains(alone)) continue;
      for (const auto& k : validation) {
        KVATTN_CHECK(k == alone || k == "nullable" || (k == "type" && std::string(alone) != "$ref"),
                     "json_schema: ", join(path, k), " beside ", alone, " is not supported");
      }
    }
    if (s.contains("$ref")) return ref(s["$ref"], join(path, "$ref"), depth);
    if (s.contains("const")) return b_.literal(s["const"].dump());
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      KVATTN_CHECK(e.is_array() && !e.empty(), "json_schema: ", join(path, "enum"),
                   " must be a non-empty array");
      std::vector<Symbol> alts;
      for (const auto& v : e) alts.push_back(b_.literal(v.dump()));
      return b_.choice(alts);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& list = s[key];
      KVATTN_CHECK(list.is_array() && !list.empty(), "json_schema: ", join(path, key),
                   " must be a non-empty array");
      std::vector<Symbol> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        alts.push_back(visit(list[i], join(path, key) + "." + std::to_string(i), depth + 1));
      }
      return b_.choice(alts);
    }
    if (s.contains("allOf")) {
      const Json& list = s["allOf"];
      KVATTN_CHECK(list.is_array() && list.size() == 1, "json_schema: ", join(path, "allOf"),
                   " is supported with exactly one schema");
      return visit(list[0], join(path, "allOf.0"), depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else {
        KVATTN_CHECK(t.is_array() && !t.empty(), "json_schema: ", join(path, "type"),
                     " must be a type name or a non-empty array of them");
        for (const auto& x : t) {
          KVATTN_CHECK(x.is_string(), "json_schema: ", join(path, "type"), " must hold type names");
          types.push_back(x.get<std::string>());
        }
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return text_.value();
    }
    std::vector<Symbol> alts;
    for (const auto& t : types) alts.push_back(typed(s, t, path, depth));
    return b_.choice(alts);
  }

 private:
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static int64_t count(const Json& s, const char* key, const std::string& path, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    KVATTN_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, "json_schema: ", join(path, key),
                 " must be a non-negative integer, not ", v.dump());
    return v.get<int64_t>();
  }

  Symbol typed(const Json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "null") return b_.literal("null");
    if (type == "boolean") return text_.boolean();
    if (type == "string") return string(s, path);
    if (type == "integer" || type == "number") return numeric(s, type, path);
    if (type == "array") return array(s, path, depth);
    if (type == "object") return object(s, path, depth);
    KVATTN_CHECK(false, "json_schema: ", join(path, "type"), " '", type,
                 "' is not a JSON Schema type (null, boolean, string, integer, number, array, "
                 "object)");
    return b_.empty();
  }

  Symbol string(const Json& s, const std::string& path) {
    const int64_t min = count(s, "minLength", path, 0);
    const int64_t max = count(s, "maxLength", path, -1);
    KVATTN_CHECK(max < 0 || max >= min, "json_schema: ", join(path, "maxLength"), " ", max,
                 " is below minLength ", min);
    if (!s.contains("pattern")) return text_.string(min, max);
    KVATTN_CHECK(!s.contains("minLength") && !s.contains("maxLength"),
                 "json_schema: ", join(path, "pattern"),
                 " together with minLength / maxLength is not supported");
    KVATTN_CHECK(s["pattern"].is_string(), "json_schema: ", join(path, "pattern"),
                 " must be a string");
    // The pattern's strings, less those that would need JSON escapes ('"', '\', controls).
    ByteSet plain;
    plain.set();
    for (int c = 0; c < 0x20; ++c) plain.reset(static_cast<size_t>(c));
    plain.reset('"');
    plain.reset('\\');
    const auto g = regex_grammar(search_pattern(s["pattern"].get<std::string>()));
    return b_.sequence({b_.byte('"'), b_.include(*g, plain), b_.byte('"')});
  }

  // minimum / exclusiveMinimum (or maximum / exclusiveMaximum) as one bound: the tighter of
  // the two where both are numbers; draft 4's boolean exclusiveMinimum makes minimum exclusive.
  // Integers take the nearest integer inside a fractional bound; numbers need integer bounds.
  std::optional<Bound> bound(const Json& s, const std::string& type, const std::string& path,
                             bool lower) {
    const char* plain = lower ? "minimum" : "maximum";
    const char* strict = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<Bound> out;
    const auto take = [&](const char* key, bool exclusive) {
      const Json& m = s[key];
      KVATTN_CHECK(m.is_number(), "json_schema: ", join(path, key), " must be a number, not ",
                   m.dump());
      double v = m.get<double>();
      KVATTN_CHECK(std::isfinite(v), "json_schema: ", join(path, key), " must be finite");
      if (type == "integer") {  // x >= 2.5 is x >= 3, x > 2 is x >= 3
        if (lower) v = exclusive ? std::floor(v) + 1 : std::ceil(v);
        else v = exclusive ? std::ceil(v) - 1 : std::floor(v);
        exclusive = false;
      } else {
        KVATTN_CHECK(v == std::floor(v), "json_schema: ", join(path, key), " ", m.dump(),
                     " is not supported for numbers (integer bounds only, e.g. 0 and 1)");
      }
      const Bound b{static_cast<int64_t>(std::clamp(v, -1e18, 1e18)), exclusive};
      const bool tighter = !out || (lower ? b.value > out->value : b.value < out->value) ||
                           (b.value == out->value && b.exclusive);
      if (tighter) out = b;
    };
    bool draft4_exclusive = false;
    if (s.contains(strict) && s[strict].is_boolean()) {
      draft4_exclusive = s[strict].get<bool>();
      KVATTN_CHECK(!draft4_exclusive || s.contains(plain), "json_schema: ", join(path, strict),
                   " true needs ", plain, " beside it (draft 4)");
    } else if (s.contains(strict)) {
      take(strict, true);
    }
    if (s.contains(plain)) take(plain, draft4_exclusive);
    return out;
  }

  Symbol numeric(const Json& s, const std::string& type, const std::string& path) {
    const auto lo = bound(s, type, path, true);
    const auto hi = bound(s, type, path, false);
    if (!lo && !hi) return type == "integer" ? text_.integer() : text_.number();
    std::optional<Symbol> range;
    if (type == "integer") {
      range = integer_range(b_, lo ? std::optional(lo->value) : std::nullopt,
                            hi ? std::optional(hi->value) : std::nullopt, kMaxDigits);
    } else {
      range = number_range(b_, lo, hi, kMaxDigits);
    }
    KVATTN_CHECK(range.has_value(), "json_schema: ", path.empty() ? "the schema" : "'" + path + "'",
                 "'s bounds allow no ", type, " (of at most ", kMaxDigits, " digits)");
    return *range;
  }

  Symbol array(const Json& s, const std::string& path, int depth) {
    const int64_t min = count(s, "minItems", path, 0);
    const int64_t max = count(s, "maxItems", path, -1);
    KVATTN_CHECK(max < 0 || max >= min, "json_schema: ", join(path, "maxItems"), " ", max,
                 " is below minItems ", min);
    // Tuple items: prefixItems (2020-12), or items as an array (earlier drafts) with
    // additionalItems for the rest.
    const Json* prefix = nullptr;
    const Json* rest = nullptr;
    std::string rest_key = "items";
    if (s.contains("prefixItems")) prefix = &s["prefixItems"];
    if (s.contains("items") && s["items"].is_array()) {
      KVATTN_CHECK(prefix == nullptr, "json_schema: ", join(path, "items"),
                   " as an array beside prefixItems");
      prefix = &s["items"];
      if (s.contains("additionalItems")) rest = &s["additionalItems"], rest_key = "additionalItems";
    } else if (s.contains("items")) {
      rest = &s["items"];
    }
    const bool more = rest == nullptr || !rest->is_boolean() || rest->get<bool>();
    const Symbol item = rest == nullptr
                            ? text_.value()
                            : (more ? visit(*rest, join(path, rest_key), depth + 1) : b_.empty());
    if (prefix == nullptr || prefix->empty()) {
      KVATTN_CHECK(prefix == nullptr || prefix->is_array(),
                   "json_schema: ", join(path, "prefixItems"), " must be an array");
      return more ? text_.list(item, min, max) : text_.list(item, 0, 0);
    }
    KVATTN_CHECK(prefix->is_array(), "json_schema: ", join(path, "prefixItems"),
                 " must be an array");
    const auto k = static_cast<int64_t>(prefix->size());
    KVATTN_CHECK(more || min <= k, "json_schema: ", join(path, "minItems"), " ", min,
                 " exceeds the ", k, " items allowed");
    std::vector<Symbol> items;
    for (int64_t i = 0; i < k; ++i) {
      items.push_back(visit((*prefix)[static_cast<size_t>(i)],
                            join(path, "prefixItems." + std::to_string(i)), depth + 1));
    }
    // At most `present` of the prefix items appear; items beyond the prefix only after all k.
    const int64_t present = max < 0 ? k : std::min(max, k);
    const int64_t extra_max = !more || present < k ? 0 : (max < 0 ? -1 : max - k);
    // tail(i): what follows the first i items (1 <= i <= present).
    Symbol tail = extra_max == 0 ? b_.empty()
                                 : b_.repeat(b_.sequence({text_.sep(), item}),
                                             std::max<int64_t>(0, min - k), extra_max);
    for (int64_t i = present - 1; i >= 1; --i) {
      const Symbol here = b_.sequence({text_.sep(), items[static_cast<size_t>(i)], tail});
      tail = i < min ? here : b_.optional(here);
    }
    Symbol body = b_.sequence({items[0], tail});
    if (min == 0) body = b_.optional(body);
    if (max == 0) body = b_.empty();
    return b_.sequence({b_.byte('['), text_.ws(), body, text_.ws(), b_.byte(']')});
  }

  Symbol object(const Json& s, const std::string& path, int depth) {
    std::vector<std::string> names;
    std::vector<Symbol> values;
    if (s.contains("properties")) {
      const Json& props = s["properties"];
      KVATTN_CHECK(props.is_object(), "json_schema: ", join(path, "properties"),
                   " must be an object");
      for (const auto& [name, sub] : props.items()) {
        names.push_back(name);
        values.push_back(visit(sub, join(path, "properties." + name), depth + 1));
      }
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& req = s["required"];
      KVATTN_CHECK(req.is_array(), "json_schema: ", join(path, "required"), " must be an array");
      for (const auto& r : req) {
        KVATTN_CHECK(r.is_string(), "json_schema: ", join(path, "required"),
                     " must hold property names");
        const std::string name = r.get<std::string>();
        if (required.insert(name).second &&
            std::find(names.begin(), names.end(), name) == names.end()) {
          names.push_back(name);  // required without a schema: any value
          values.push_back(text_.value());
        }
      }
    }
    // additionalProperties absent: false where properties are declared (strict, as OpenAI and
    // xgrammar), any members where none are (a bare {"type": "object"} is any object).
    std::optional<Symbol> extra;  // additionalProperties' member
    const Json any = true;
    const Json& a = s.contains("additionalProperties") ? s["additionalProperties"]
                    : s.contains("properties")         ? Json(false)
                                                       : any;
    if (!a.is_boolean() || a.get<bool>()) {
      const Symbol v = visit(a, join(path, "additionalProperties"), depth + 1);
      extra = b_.sequence({text_.string(0, -1), text_.ws(), b_.byte(':'), text_.ws(), v});
    }
    const size_t n = names.size();
    // rest(i): the members after at least one, from property i on; first(i): from property i
    // on with none written yet. Declared properties come in their order, then any extras.
    Symbol rest = extra ? b_.star(b_.sequence({text_.sep(), *extra})) : b_.empty();
    Symbol first = extra ? b_.optional(b_.sequence({*extra, rest})) : b_.empty();
    for (size_t i = n; i-- > 0;) {
      const Symbol member = b_.sequence(
          {b_.literal(Json(names[i]).dump()), text_.ws(), b_.byte(':'), text_.ws(), values[i]});
      const Symbol with_rest = b_.sequence({text_.sep(), member, rest});
      const Symbol with_first = b_.sequence({member, rest});
      if (required.count(names[i])) {
        rest = with_rest;
        first = with_first;
      } else {
        rest = b_.choice({with_rest, rest});
        first = b_.choice({with_first, first});
      }
    }
    return b_.sequence({b_.byte('{'), text_.ws(), first, text_.ws(), b_.byte('}')});
  }

  Symbol ref(const Json& r, const std::string& path, int depth) {
    KVATTN_CHECK(r.is_string(), "json_schema: ", path, " must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return b_.ref(it->second);
    KVATTN_CHECK(target.starts_with("#"), "json_schema: ", path, " '", target,
                 "' is not supported (only references inside the schema: #, #/$defs/...)");
    const Json* node = &root_;
    try {
      node = &root_.at(Json::json_pointer(target.substr(1)));
    } catch (const nlohmann::json::exception&) {
      KVATTN_CHECK(false, "json_schema: ", path, " '", target, "' names nothing in the schema");
    }
    const int32_t rule = b_.declare("ref");
    refs_[target] = rule;
    b_.define(rule, visit(*node, target, depth + 1));
    return b_.ref(rule);
  }

  GrammarBuilder& b_;
  JsonText text_;
  const Json& root_;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  GrammarBuilder b;
  JsonText text(b);
  return b.build(b.sequence({text.ws(), text.any_object()}));
}

std::shared_ptr<const Grammar> json_schema_grammar_from(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  SchemaGrammar g(b, schema);
  const Symbol value = g.visit(schema, "", 0);
  JsonText text(b);
  return b.build(b.sequence({text.ws(), value}));
}

std::shared_ptr<const Grammar> json_schema_grammar(std::string_view schema) {
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(schema);
  } catch (const nlohmann::json::exception& e) {
    KVATTN_CHECK(false, "json_schema: not valid JSON (", e.what(), ")");
  }
  return json_schema_grammar_from(parsed);
}

std::shared_ptr<const Grammar> choice_grammar(const std::vector<std::string>& choices) {
  KVATTN_CHECK(!choices.empty(), "choice: at least one choice is needed");
  GrammarBuilder b;
  std::vector<Symbol> alts;
  for (const auto& c : choices) alts.push_back(b.literal(c));
  return b.build(b.choice(alts));
}

}  // namespace kvattn::structured
