// GBNF becomes a grammar in one pass, as llama.cpp reads it: each rule body turns into
// GrammarBuilder symbols while it is parsed, a rule name is declared where it is first seen
// (so it can be used before its definition, and recursively) and defined once the whole text
// is read, its last definition winning.
#include "engine/structured/gbnf_grammar.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/structured/code_points.h"
#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

using Symbol = GrammarBuilder::Symbol;

constexpr int64_t kMaxSize = static_cast<int64_t>(GrammarBuilder::kMaxElements);

// A parsed item and what the checks need to know of it.
struct Item {
  Symbol symbol;
  int64_t size = 1;       // grammar elements if every repetition copied its body
  bool nullable = false;  // visibly matches "" (a rule reference counts as not)
};

struct Rule {
  int32_t id;
  size_t first_use;            // where the name first appears, for "undefined rule"
  size_t defined_at = 0;       // where its last definition starts
  std::optional<Symbol> body;  // the last definition
};

// What a matcher stack meets on entering a rule before it consumes a byte (Matcher::expand
// walks every path): `depth`, the most frames a chain of rules each starting the next pushes;
// `starts`, the paths into a first byte set; `empties`, the paths to the rule's end, each of
// which goes on into what follows the rule. Ambiguity multiplies paths: r2 ::= r1 | r1 "x",
// r3 ::= r2 | r2 "x", ... doubles them per rule, and so does ("a"?){2} per copy. Per rule,
// by an iterative depth-first walk of the left edges, which GrammarBuilder::build has
// checked to be acyclic.
struct Reach {
  int64_t depth = 0;
  int64_t starts = 0;
  int64_t empties = 0;
};

constexpr int64_t kCap = int64_t{1} << 40;  // counts saturate here

std::vector<Reach> reach(const Grammar& g) {
  const auto add = [](int64_t a, int64_t b) { return std::min(kCap, a + b); };
  const auto mul = [](int64_t a, int64_t b) { return a != 0 && b > kCap / a ? kCap : a * b; };
  const size_t n = g.num_rules();
  std::vector<Reach> out(n);
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  struct Frame {
    int32_t rule;
    size_t alt = 0;
    uint32_t pos = 0;
    int64_t ways = 1;   // paths through the alternative up to pos without a byte
    bool fresh = true;  // pos is not yet in alternative `alt`
  };
  std::vector<Frame> path;
  for (size_t start = 0; start < n; ++start) {
    if (state[start] != 0) continue;
    state[start] = 1;
    path.push_back(Frame{static_cast<int32_t>(start)});
    while (!path.empty()) {
      Frame& f = path.back();
      Reach& r = out[static_cast<size_t>(f.rule)];
      const auto& alts = g.alternatives(f.rule);
      if (f.alt == alts.size()) {
        r.depth = add(r.depth, 1);
        state[static_cast<size_t>(f.rule)] = 2;
        path.pop_back();
        continue;
      }
      if (f.fresh) f.pos = alts[f.alt], f.ways = 1, f.fresh = false;
      const int32_t e = g.elements()[f.pos];
      const auto next_alt = [&] { ++f.alt, f.fresh = true; };
      if (!Grammar::is_ref(e)) {  // a byte set, or the end of the rule
        int64_t& paths = e == Grammar::kEnd ? r.empties : r.starts;
        paths = add(paths, f.ways);
        next_alt();
        continue;
      }
      const auto s = static_cast<size_t>(Grammar::ref_rule(e));
      if (state[s] == 0) {
        state[s] = 1;
        path.push_back(Frame{static_cast<int32_t>(s)});
        continue;
      }
      if (state[s] == 1) {  // left recursion, which build() refuses: not reached
        next_alt();
        continue;
      }
      r.depth = std::max(r.depth, out[s].depth);
      r.starts = add(r.starts, mul(f.ways, out[s].starts));
      f.ways = mul(f.ways, out[s].empties);
      if (f.ways == 0) {
        next_alt();
      } else {
        ++f.pos;
      }
    }
  }
  return out;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

class Parser {
 public:
  Parser(std::string_view text, GrammarBuilder& b) : t_(text), b_(b), chars_(b) {}

  Symbol parse() {
    skip_space(true);
    while (!at_end()) rule();
    const auto root = rules_.find("root");
    if (root == rules_.end() || !root->second.body) {
      fail(t_.size(), "no rule named 'root' is defined (the start rule)");
    }
    const Rule* undefined = nullptr;
    for (const auto& [name, r] : rules_) {
      if (!r.body && (!undefined || r.first_use < undefined->first_use)) undefined = &r;
    }
    if (undefined) {
      const size_t at = undefined->first_use;
      size_t end = at;
      while (end < t_.size() && is_name_char(t_[end])) ++end;
      fail(at, "undefined rule '", t_.substr(at, end - at), "'");
    }
    for (const auto& [name, r] : rules_) b_.define(r.id, *r.body);
    return b_.ref(root->second.id);
  }

  // Refuses grammars a matcher would need too much work per byte for (Reach), naming the
  // worst rule of the text.
  void check_reach(const Grammar& g) const {
    const std::vector<Reach> all = reach(g);
    const auto worst = [&](auto value, int64_t limit, const char* what) {
      int64_t most = 0;
      for (const Reach& r : all) most = std::max(most, value(r));
      if (most <= limit) return;
      const std::pair<const std::string, Rule>* named = nullptr;
      for (const auto& entry : rules_) {
        if (!named || value(all[static_cast<size_t>(entry.second.id)]) >
                          value(all[static_cast<size_t>(named->second.id)]))
          named = &entry;
      }
      fail(named->second.defined_at, "rule '", named->first, "' ", what, " (", most,
           " somewhere in the grammar; at most ", limit, ")");
    };
    worst([](const Reach& r) { return r.depth; }, kMaxGbnfNesting,
          "nests too many rules deep before its first character (counting those groups and "
          "repetitions make)");
    worst([](const Reach& r) { return std::max(r.starts, r.empties); }, kMaxGbnfStarts,
          "can begin in too many ways (ambiguity multiplies them: alternatives sharing a "
          "rule, repetitions of something that can match the empty string)");
  }

 private:
  bool at_end(size_t ahead = 0) const { return pos_ + ahead >= t_.size(); }
  char peek(size_t ahead = 0) const { return at_end(ahead) ? '\0' : t_[pos_ + ahead]; }

  // "line L, column C" of text offset `at`; columns count characters.
  std::string where(size_t at) const {
    const auto begin = t_.begin();
    const size_t line = 1 + static_cast<size_t>(std::count(begin, begin + at, '\n'));
    const size_t line_start = at == 0 ? std::string_view::npos : t_.rfind('\n', at - 1);
    size_t column = 1;
    for (size_t i = line_start == std::string_view::npos ? 0 : line_start + 1; i < at; ++i) {
      column += (static_cast<uint8_t>(t_[i]) & 0xC0) != 0x80;
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
  }
  template <typename... Parts>
  [[noreturn]] void fail(size_t at, const Parts&... what) const {
    KVATTN_FAIL("gbnf: ", where(at), ": ", what...);
  }
  // What stands at `at`, for messages.
  std::string found(size_t at) const {
    if (at >= t_.size()) return "the end of the text";
    const char c = t_[at];
    if (c == '\n' || c == '\r') return "a line break";
    if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
    if (const Utf8Char u = decode_utf8(t_, at); u.length > 1) {
      std::string quoted = "'";  // (appends: GCC 12 warns falsely on "'" + a temporary)
      quoted.append(t_.substr(at, u.length));
      quoted += '\'';
      return quoted;
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "byte 0x%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
    return hex;
  }

  // Spaces, tabs and # comments; line breaks too where a rule goes on (`newlines`).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view name() {
    const size_t at = pos_;
    while (is_name_char(peek())) ++pos_;
    return t_.substr(at, pos_ - at);
  }

  Rule& rule_named(std::string_view name, size_t at) {
    auto it = rules_.find(std::string(name));
    if (it != rules_.end()) return it->second;
    if (rules_.size() == kMaxGbnfRules) fail(at, "more than ", kMaxGbnfRules, " rule names");
    const int32_t id = b_.declare(std::string(name));
    return rules_.emplace(std::string(name), Rule{id, at, at, std::nullopt}).first->second;
  }

  void rule() {
    const size_t at = pos_;
    const std::string_view n = name();
    if (n.empty()) {
      fail(at, "expected a rule name, found ", found(at),
           rules_.empty() ? ""
                          : " (a rule goes on to the next line only inside ( ) or after "
                            "'|' or '::=')");
    }
    skip_space(false);
    if (t_.substr(pos_, 3) != "::=") {
      fail(pos_, "expected '::=' after the rule name '", n, "', found ", found(pos_));
    }
    pos_ += 3;
    skip_space(true);
    Rule& r = rule_named(n, at);
    r.defined_at = at;
    r.body = alternatives(0).symbol;
    const bool line_break = peek() == '\n' || peek() == '\r';
    if (!line_break && !at_end()) {
      fail(pos_, "unexpected ", found(pos_), " in the rule '", n, "'",
           t_.substr(pos_, 3) == "::=" ? " (a rule goes on past a line break after '::=': "
                                         "an empty rule needs \"\")"
                                       : "");
    }
    skip_space(true);
  }

  Item alternatives(int depth) {
    std::vector<Item> alts = {sequence(depth)};
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(sequence(depth));
    }
    if (alts.size() == 1) return alts[0];
    Item out{b_.choice(symbols(alts)), 1, false};
    for (const Item& a : alts) {
      out.size = std::min(kMaxSize + 1, out.size + a.size);
      out.nullable = out.nullable || a.nullable;
    }
    return out;
  }

  Item sequence(int depth) {
    std::vector<Item> items;
    for (;;) {
      const size_t at = pos_;
      const char c = peek();
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) fail(at, "'", c, "' has nothing to repeat");
        items.back() = repeated(items.back(), depth);
        continue;
      }
      if (c == '"') {
        items.push_back(literal());
      } else if (c == '[') {
        items.push_back(char_class());
      } else if (c == '.') {
        ++pos_;
        items.push_back(Item{*chars_.symbol(kScalars), 1, false});
      } else if (c == '(') {
        items.push_back(group(depth));
      } else if (is_name_char(c)) {
        items.push_back(Item{b_.ref(rule_named(name(), at).id), 1, false});
      } else {
        break;
      }
      skip_space(depth > 0);
    }
    if (items.empty()) return Item{empty(), 1, true};
    if (items.size() == 1) return items[0];
    Item out{b_.sequence(symbols(items)), 1, true};
    for (const Item& i : items) {
      out.size = std::min(kMaxSize + 1, out.size + i.size);
      out.nullable = out.nullable && i.nullable;
    }
    return out;
  }

  Item group(int depth) {
    const size_t open = pos_++;
    if (depth + 1 > kMaxGbnfDepth) fail(open, "groups nested deeper than ", kMaxGbnfDepth);
    skip_space(true);
    const Item inner = alternatives(depth + 1);
    if (peek() != ')') {
      fail(pos_, "expected ')' to close the group opened at ", where(open), ", found ",
           found(pos_));
    }
    ++pos_;
    return inner;
  }

  Item literal() {
    const size_t open = pos_++;
    std::string bytes;
    while (peek() != '"') {
      if (at_end()) fail(open, "unterminated string literal (no closing '\"')");
      bytes += utf8(character());
    }
    ++pos_;
    if (bytes.empty()) return Item{empty(), 1, true};
    return Item{b_.literal(bytes), static_cast<int64_t>(bytes.size()), false};
  }

  Item char_class() {
    const size_t open = pos_++;
    const bool negate = peek() == '^';
    if (negate) ++pos_;
    CodePoints set;
    while (peek() != ']') {
      if (at_end()) fail(open, "unterminated character class (no closing ']')");
      const size_t at = pos_;
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && !at_end(1) && peek(1) != ']') {
        ++pos_;
        hi = character();
        if (hi < lo) {
          fail(at, "range '", t_.substr(at, pos_ - at), "' has its end below its start");
        }
      }
      set.emplace_back(lo, hi);
    }
    ++pos_;
    if (set.empty()) fail(open, "empty character class (write \\] for a ']' in a class)");
    set = normalized(std::move(set));
    const std::optional<Symbol> s = chars_.symbol(negate ? negated(set) : intersect(set, kScalars));
    if (!s) fail(open, "character class matches no character");
    return Item{*s, 1, false};
  }

  // One character of a literal or class: an escape or one UTF-8 character.
  uint32_t character() {
    const size_t at = pos_;
    if (peek() != '\\') {
      const Utf8Char c = decode_utf8(t_, pos_);
      if (c.length == 0) fail(at, "invalid UTF-8 (", found(at), ")");
      pos_ += c.length;
      return c.cp;
    }
    ++pos_;
    if (at_end()) fail(at, "the text ends inside an escape");
    const char e = t_[pos_++];
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
        return static_cast<uint8_t>(e);
      case 'x':
        return hex(at, 2);
      case 'u':
        return hex(at, 4);
      case 'U':
        return hex(at, 8);
      default:
        fail(at, "unknown escape '\\", e >= 0x20 && e < 0x7f ? std::string(1, e) : found(at + 1),
             "' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)");
    }
  }
  // The `digits` hex digits after \x, \u or \U (at the backslash).
  uint32_t hex(size_t at, int digits) {
    uint64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) fail(at, "escape '\\", t_[at + 1], "' needs ", digits, " hex digits");
      v = v * 16 + static_cast<uint64_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint || !is_scalar(static_cast<uint32_t>(v))) {
      fail(at, "escape '", t_.substr(at, pos_ - at),
           "' is not a Unicode scalar value (a surrogate or past U+10FFFF)");
    }
    return static_cast<uint32_t>(v);
  }

  // `item` under the quantifier at pos_.
  Item repeated(const Item& item, int depth) {
    const size_t at = pos_;
    int64_t min = 0, max = -1;
    switch (t_[pos_++]) {
      case '*':
        break;
      case '+':
        min = 1;
        break;
      case '?':
        max = 1;
        break;
      default:
        braces(at, depth, min, max);
        break;
    }
    const std::string_view quantifier = t_.substr(at, pos_ - at);
    skip_space(depth > 0);
    if (max < 0 && item.nullable) {
      fail(at, "'", quantifier,
           "' repeats an item that matches the empty string "
           "without limit (left recursion, which llama.cpp refuses too)");
    }
    const int64_t copies = max < 0 ? min + 1 : max;
    const int64_t body = item.size + 1;
    if (copies > 0 && body > (kMaxSize + 1) / copies) {
      fail(at, "the repetition expands to more than ", GrammarBuilder::kMaxElements,
           " grammar elements");
    }
    if (min == 1 && max == 1) return item;
    Item out{empty(), copies * body + 1, min == 0 || item.nullable};
    if (max == 0) return out;
    if (min == 0 && max == 1) {
      out.symbol = b_.optional(item.symbol);
    } else if (min == 0 && max < 0) {
      out.symbol = b_.star(item.symbol);
    } else if (min == 1 && max < 0) {
      out.symbol = b_.plus(item.symbol);
    } else {
      out.symbol = b_.repeat(item.symbol, min, max);
    }
    return out;
  }
  // {m} {m,} {m,n} {,n}, at the '{' (consumed); spaces are allowed inside.
  void braces(size_t open, int depth, int64_t& min, int64_t& max) {
    skip_space(depth > 0);
    const std::optional<int64_t> lo = number();
    skip_space(depth > 0);
    std::optional<int64_t> hi = lo;
    if (peek() == ',') {
      ++pos_;
      skip_space(depth > 0);
      hi = number();
      skip_space(depth > 0);
      if (!lo && !hi) fail(open, "repetition '{,}' needs a bound");
    } else if (!lo) {
      fail(pos_, "expected a number in the repetition, found ", found(pos_));
    }
    if (peek() != '}') fail(pos_, "expected '}' to close the repetition, found ", found(pos_));
    ++pos_;
    min = lo.value_or(0);
    max = hi.value_or(-1);
    if (std::max(min, max) > kMaxSize) {
      fail(open, "repetition count ", std::max(min, max), " is too large (at most ", kMaxSize, ")");
    }
    if (max >= 0 && max < min) {
      fail(open, "bad repetition bounds {", min, ",", max, "}: the maximum is below the minimum");
    }
  }
  std::optional<int64_t> number() {
    if (peek() < '0' || peek() > '9') return std::nullopt;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') v = std::min(v * 10 + (t_[pos_++] - '0'), kMaxSize + 1);
    return v;
  }

  Symbol empty() {
    if (!empty_) empty_ = b_.empty();
    return *empty_;
  }
  static std::vector<Symbol> symbols(const std::vector<Item>& items) {
    std::vector<Symbol> out;
    out.reserve(items.size());
    for (const Item& i : items) out.push_back(i.symbol);
    return out;
  }

  std::string_view t_;
  size_t pos_ = 0;
  GrammarBuilder& b_;
  Utf8Sets chars_;
  std::unordered_map<std::string, Rule> rules_;
  std::optional<Symbol> empty_;
};

}  // namespace

std::shared_ptr<const Grammar> gbnf_grammar(std::string_view text) {
  GrammarBuilder b;
  try {
    Parser parser(text, b);
    const Symbol root = parser.parse();
    auto g = b.build(root);
    parser.check_reach(*g);
    return g;
  } catch (const Error& e) {
    // The builder's own errors (left recursion, size) get the prefix the parser's have.
    if (std::string_view(e.what()).starts_with("gbnf: ")) throw;
    KVATTN_FAIL("gbnf: ", e.what());
  }
}

}  // namespace kvattn::structured
