// A regex becomes a grammar in two passes: Parser turns the pattern into a small tree of code
// point sets, concatenations, alternations and repetitions (throwing on whatever it does not
// support), and Compiler turns the tree into GrammarBuilder symbols, a code point set into
// UTF-8 byte-range sequences (code_points.h).
#include "engine/structured/regex_grammar.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/code_points.h"
#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

using Symbol = GrammarBuilder::Symbol;

const CodePoints kDigit = {{'0', '9'}};
const CodePoints kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodePoints kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

struct Node {
  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  Node(Kind k, size_t at, CodePoints s = {}) : kind(k), offset(at), set(std::move(s)) {}

  Kind kind;
  size_t offset;              // in the pattern, for messages
  CodePoints set;             // kSet
  std::vector<int32_t> kids;  // kConcat, kAlt; kRepeat: its body
  int64_t min = 0, max = 0;   // kRepeat; max < 0: unbounded

  bool single() const {
    return kind == Kind::kSet && set.size() == 1 && set[0].first == set[0].second;
  }
};

// The pattern as error messages show it: the first 200 bytes, cut at a character boundary.
std::string shown(std::string_view pattern) {
  if (pattern.size() <= 200) return std::string(pattern);
  size_t n = 200;
  while (n > 0 && (static_cast<uint8_t>(pattern[n]) & 0xC0) == 0x80) --n;
  return std::string(pattern.substr(0, n)) + "...";
}

template <typename... Parts>
[[noreturn]] void fail(std::string_view pattern, const Parts&... parts) {
  KVATTN_FAIL("regex '", shown(pattern), "': ", parts...);
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  int32_t parse() {
    const int32_t root = alternation(0);
    if (pos_ < p_.size()) fail(p_, "unbalanced ')' at offset ", pos_);
    return root;
  }
  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  // A character class escape (\d) or one code point.
  struct Item {
    CodePoints set;
    bool single = true;
  };
  static Item one(uint32_t cp) { return Item{{{cp, cp}}, true}; }
  static Item many(CodePoints set) { return Item{std::move(set), false}; }

  template <typename... Parts>
  [[noreturn]] void unsupported(size_t at, const Parts&... what) const {
    fail(p_, what..., " at offset ", at, " is not supported");
  }
  char peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= p_.size(); }
  int32_t add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  size_t start_anchor() const {
    return peek() == '^' ? 1 : peek() == '\\' && peek(1) == 'A' ? 2 : 0;
  }
  size_t end_anchor() const {
    return peek() == '$' ? 1 : peek() == '\\' && (peek(1) == 'z' || peek(1) == 'Z') ? 2 : 0;
  }
  bool quantifier_next() const {
    const char c = peek();
    if (c == '{') return std::isdigit(static_cast<uint8_t>(peek(1))) || peek(1) == ',';
    return c == '*' || c == '+' || c == '?';
  }

  int32_t alternation(int depth) {
    Node alt{Node::Kind::kAlt, pos_};
    alt.kids.push_back(concatenation(depth));
    while (peek() == '|') {
      ++pos_;
      alt.kids.push_back(concatenation(depth));
    }
    return alt.kids.size() == 1 ? alt.kids[0] : add(std::move(alt));
  }

  // Anchors are accepted only where they change nothing: ^ opening and $ closing a
  // top-level alternative.
  int32_t concatenation(int depth) {
    Node cat{Node::Kind::kConcat, pos_};
    if (depth == 0) pos_ += start_anchor();
    while (!at_end() && peek() != '|' && peek() != ')') {
      const size_t at = pos_;
      if (const size_t n = start_anchor()) {
        fail(p_, "anchor ", p_.substr(at, n), " at offset ", at,
             " is not supported (only at the start of the pattern)");
      }
      if (const size_t n = end_anchor()) {
        pos_ += n;
        if (depth == 0 && (at_end() || peek() == '|')) break;
        fail(p_, "anchor ", p_.substr(at, n), " at offset ", at,
             " is not supported (only at the end of the pattern)");
      }
      if (quantifier_next())
        fail(p_, "quantifier '", peek(), "' at offset ", at, " has nothing to repeat");
      cat.kids.push_back(quantified(atom(depth)));
    }
    if (cat.kids.empty()) return add(Node{Node::Kind::kEmpty, cat.offset});
    return cat.kids.size() == 1 ? cat.kids[0] : add(std::move(cat));
  }

  // Lazy (x*?) and possessive (x*+) forms match the same whole strings as greedy ones.
  int32_t quantified(int32_t atom) {
    if (!quantifier_next()) return atom;
    Node rep{Node::Kind::kRepeat, pos_};
    rep.kids = {atom};
    switch (p_[pos_++]) {
      case '*':
        rep.min = 0, rep.max = -1;
        break;
      case '+':
        rep.min = 1, rep.max = -1;
        break;
      case '?':
        rep.min = 0, rep.max = 1;
        break;
      default:
        braces(rep);
        break;
    }
    if (peek() == '?' || peek() == '+') ++pos_;
    if (quantifier_next()) {
      fail(p_, "quantifier '", peek(), "' at offset ", pos_, " follows another quantifier");
    }
    return add(std::move(rep));
  }

  // {m} {m,} {m,n} {,n}, the '{' consumed.
  void braces(Node& rep) {
    const std::optional<int64_t> lo = number();
    std::optional<int64_t> hi = lo;
    if (peek() == ',') {
      ++pos_;
      hi = number();
      if (!hi) hi = -1;
    }
    if (peek() != '}' || (!lo && hi.value_or(-1) < 0)) {
      fail(p_, "malformed repetition at offset ", rep.offset,
           " (expected {m}, {m,}, {m,n} or {,n})");
    }
    ++pos_;
    rep.min = lo.value_or(0);
    rep.max = *hi;
    if (rep.max >= 0 && rep.max < rep.min) {
      fail(p_, "repetition {", rep.min, ",", rep.max, "} at offset ", rep.offset,
           " has max below min");
    }
  }
  std::optional<int64_t> number() {
    if (!std::isdigit(static_cast<uint8_t>(peek()))) return std::nullopt;
    int64_t v = 0;
    while (std::isdigit(static_cast<uint8_t>(peek()))) {
      v = std::min<int64_t>(v * 10 + (p_[pos_++] - '0'), int64_t{1} << 40);  // too large anyway
    }
    return v;
  }

  int32_t atom(int depth) {
    const size_t at = pos_;
    Item item;
    switch (peek()) {
      case '(':
        return group(depth);
      case '[':
        return bracket();
      case '.':
        ++pos_;
        item = many(negated({{'\n', '\n'}}));
        break;
      case '\\':
        item = escape(false);
        break;
      default:
        item = one(code_point());
        break;
    }
    return add(Node{Node::Kind::kSet, at, std::move(item.set)});
  }

  int32_t group(int depth) {
    const size_t open = pos_++;
    if (depth >= kMaxRegexDepth)
      fail(p_, "groups nested deeper than ", kMaxRegexDepth, " at offset ", open);
    if (peek() == '?') {
      const char c = peek(1), d = peek(2);
      if (c == ':') {
        pos_ += 2;
      } else if ((c == 'P' && d == '<') || (c == '<' && d != '=' && d != '!') || c == '\'') {
        pos_ += c == 'P' ? 3 : 2;
        const char close = c == '\'' ? '\'' : '>';
        const auto word = [&](bool digits) {
          const auto ch = static_cast<uint8_t>(peek());
          return std::isalpha(ch) || ch == '_' || (digits && std::isdigit(ch));
        };
        if (!word(false)) fail(p_, "malformed group name at offset ", open);
        while (word(true)) ++pos_;
        if (peek() != close) fail(p_, "malformed group name at offset ", open);
        ++pos_;
      } else {
        unsupported(open, group_construct(c, d));
      }
    }
    const int32_t body = alternation(depth + 1);
    if (peek() != ')') fail(p_, "missing ')' for the group opened at offset ", open);
    ++pos_;
    return body;
  }
  static std::string group_construct(char c, char d) {
    if (c == '=') return "lookahead";
    if (c == '!') return "negative lookahead";
    if (c == '<') return d == '=' ? "lookbehind" : "negative lookbehind";
    if (c == 'P' && d == '=') return "named backreference (?P=";
    if (c == '>') return "atomic group (?>";
    if (c == '#') return "comment (?#";
    if (c == '|') return "branch reset (?|";
    if (c == '(') return "conditional group (?(";
    if (c == 'R' || c == '&' || (c == 'P' && d == '>') || std::isdigit(static_cast<uint8_t>(c)))
      return "recursion";
    if (std::isalpha(static_cast<uint8_t>(c)) || c == '-' || c == '^')
      return "inline flags (?" + std::string(1, c);
    return "group syntax (?" + std::string(c ? 1 : 0, c);
  }

  int32_t bracket() {
    const size_t open = pos_++;
    const bool negate = peek() == '^';
    if (negate) ++pos_;
    CodePoints set;
    for (bool first = true;; first = false) {
      if (at_end()) fail(p_, "unterminated character class opened at offset ", open);
      if (peek() == ']' && !first) break;
      const size_t at = pos_;
      if (posix_class()) unsupported(at, "POSIX class ", p_.substr(at, pos_ - at));
      const Item lo = class_item();
      if (lo.single && peek() == '-' && pos_ + 1 < p_.size() && peek(1) != ']') {
        ++pos_;
        const Item hi = class_item();
        if (hi.single) {
          if (hi.set[0].first < lo.set[0].first) {
            fail(p_, "bad range ", p_.substr(at, pos_ - at), " at offset ", at,
                 " (its end is below its start)");
          }
          set.emplace_back(lo.set[0].first, hi.set[0].first);
          continue;
        }
        set.emplace_back('-', '-');  // [a-\d]: a literal '-', as ECMAScript reads it
        set.insert(set.end(), hi.set.begin(), hi.set.end());
      }
      set.insert(set.end(), lo.set.begin(), lo.set.end());
    }
    ++pos_;
    set = normalized(std::move(set));
    return add(Node{Node::Kind::kSet, open, negate ? negated(set) : intersect(set, kScalars)});
  }
  // [:alpha:] [=a=] [.a.] inside a class; moves past it when there.
  bool posix_class() {
    const char kind = peek(1);
    if (peek() != '[' || (kind != ':' && kind != '=' && kind != '.')) return false;
    size_t i = pos_ + 2;
    while (i < p_.size() && std::isalpha(static_cast<uint8_t>(p_[i]))) ++i;
    if (i + 1 >= p_.size() || p_[i] != kind || p_[i + 1] != ']') return false;
    pos_ = i + 2;
    return true;
  }
  Item class_item() { return peek() == '\\' ? escape(true) : one(code_point()); }

  Item escape(bool in_class) {
    const size_t at = pos_++;
    if (at_end()) fail(p_, "the pattern ends in a lone backslash");
    const char c = peek();
    if (static_cast<uint8_t>(c) >= 0x80) return one(code_point());
    ++pos_;
    switch (c) {
      case 'd':
        return many(kDigit);
      case 'D':
        return many(negated(kDigit));
      case 'w':
        return many(kWord);
      case 'W':
        return many(negated(kWord));
      case 's':
        return many(kSpace);
      case 'S':
        return many(negated(kSpace));
      case 'n':
        return one('\n');
      case 't':
        return one('\t');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'x':
        return one(hex_escape(at, 2));
      case 'u':
        return one(unicode_escape(at));
      case '0':
        if (std::isdigit(static_cast<uint8_t>(peek()))) unsupported(at, "octal escape");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        unsupported(at, "word boundary \\b");
      case 'B':
        unsupported(at, "word boundary \\B");
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        unsupported(at, "anchor \\", c, in_class ? " in a class" : "");
      case 'k':
        unsupported(at, "named backreference \\k");
      case 'g':
        unsupported(at, "backreference \\g");
      case 'p':
      case 'P':
        unsupported(at, "Unicode property \\", c);
      default:
        break;
    }
    if (std::isdigit(static_cast<uint8_t>(c))) {
      unsupported(at, in_class ? "octal escape \\" : "backreference \\", c);
    }
    if (std::isalpha(static_cast<uint8_t>(c))) unsupported(at, "escape \\", c);
    return one(static_cast<uint8_t>(c));  // escaped punctuation, space or control character
  }
  // \xHH or \x{H...} (`digits` fixed hex digits, or braced), 'x' consumed.
  uint32_t hex_escape(size_t at, int digits) {
    uint32_t v = 0;
    int n = 0;
    const bool braced = peek() == '{';
    if (braced) ++pos_;
    for (; (braced || n < digits) && std::isxdigit(static_cast<uint8_t>(peek())); ++n) {
      const char h = p_[pos_++];
      const uint32_t d =
          std::isdigit(static_cast<uint8_t>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10);
      v = std::min<uint32_t>(v * 16 + d, kMaxCodePoint + 1);
    }
    if (braced ? (n == 0 || peek() != '}') : n != digits) {
      fail(p_, "malformed escape ", p_.substr(at, pos_ - at), " at offset ", at);
    }
    if (braced) ++pos_;
    if (v > kMaxCodePoint) fail(p_, "escape at offset ", at, " is past U+10FFFF");
    return v;
  }
  // \uHHHH, \u{H...}; a \uD8xx\uDCxx pair (ECMAScript's UTF-16) is one character.
  uint32_t unicode_escape(size_t at) {
    uint32_t cp = hex_escape(at, 4);
    if (cp >= 0xD800 && cp < 0xDC00 && peek() == '\\' && peek(1) == 'u' && peek(2) != '{') {
      const size_t save = pos_;
      pos_ += 2;
      const uint32_t low = hex_escape(save, 4);
      if (low >= 0xDC00 && low < 0xE000) return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      pos_ = save;
    }
    if (cp >= 0xD800 && cp < 0xE000)
      fail(p_, "lone surrogate ", p_.substr(at, pos_ - at), " at offset ", at);
    return cp;
  }
  // One UTF-8 character of the pattern.
  uint32_t code_point() {
    const Utf8Char c = decode_utf8(p_, pos_);
    if (c.length == 0) fail(p_, "invalid UTF-8 at offset ", pos_);
    pos_ += c.length;
    return c.cp;
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<Node> nodes_;
};

class Compiler {
 public:
  Compiler(GrammarBuilder& b, std::string_view pattern, const std::vector<Node>& nodes)
      : b_(b),
        pattern_(pattern),
        nodes_(nodes),
        memo_(nodes.size()),
        nullable_(nodes.size(), -1),
        sets_(b) {}

  Symbol run(int32_t root) {
    if (expanded(root) > static_cast<int64_t>(GrammarBuilder::kMaxElements)) {
      fail(pattern_, "the pattern expands to more than ", GrammarBuilder::kMaxElements,
           " grammar elements");
    }
    std::optional<Symbol> s;
    try {
      s = compile(root, false);
    } catch (const Error& e) {
      fail(pattern_, e.what());
    }
    if (!s) fail(pattern_, "matches no string");
    return *s;
  }

 private:
  // The size of the grammar if every repetition copied its body: repetitions nested in
  // repetitions multiply, and so would the matcher's stacks.
  int64_t expanded(int32_t id) {
    constexpr int64_t kLimit = static_cast<int64_t>(GrammarBuilder::kMaxElements) + 1;
    const Node& n = nodes_[static_cast<size_t>(id)];
    int64_t size = static_cast<int64_t>(n.kids.size()) + 1;
    if (n.kind == Node::Kind::kSet && n.single())
      size = static_cast<int64_t>(utf8(n.set[0].first).size());
    if (n.kind == Node::Kind::kRepeat) {
      const int64_t copies = n.max < 0 ? n.min + 1 : n.max;
      const int64_t body = expanded(n.kids[0]) + 1;
      size = copies > 0 && body > kLimit / copies ? kLimit : copies * body + 1;
      if (size >= kLimit) {
        fail(pattern_, "repetition at offset ", n.offset, " expands to more than ",
             GrammarBuilder::kMaxElements, " grammar elements");
      }
      return size;
    }
    for (int32_t k : n.kids) size = std::min(kLimit, size + expanded(k));
    return size;
  }

  bool nullable(int32_t id) {
    int8_t& memo = nullable_[static_cast<size_t>(id)];
    if (memo >= 0) return memo;
    const Node& n = nodes_[static_cast<size_t>(id)];
    bool r = false;
    switch (n.kind) {
      case Node::Kind::kEmpty:
        r = true;
        break;
      case Node::Kind::kSet:
        r = false;
        break;
      case Node::Kind::kConcat:
        r = std::all_of(n.kids.begin(), n.kids.end(), [&](int32_t k) { return nullable(k); });
        break;
      case Node::Kind::kAlt:
        r = std::any_of(n.kids.begin(), n.kids.end(), [&](int32_t k) { return nullable(k); });
        break;
      case Node::Kind::kRepeat:
        r = n.min == 0 || nullable(n.kids[0]);
        break;
    }
    memo = r ? 1 : 0;
    return r;
  }

  // The strings node `id` matches (without "" when `nonempty`); nullopt when there are none.
  // GrammarBuilder::star needs a body that cannot match "" (else it is left-recursive), so
  // repetitions are built from their bodies' non-empty forms.
  std::optional<Symbol> compile(int32_t id, bool nonempty) {
    auto& [done, symbol] = memo_[static_cast<size_t>(id)][nonempty ? 1 : 0];
    if (done) return symbol;
    const Node& n = nodes_[static_cast<size_t>(id)];
    switch (n.kind) {
      case Node::Kind::kEmpty:
        symbol = nonempty ? std::nullopt : std::optional(empty());
        break;
      case Node::Kind::kSet:
        symbol = set(n);
        break;
      case Node::Kind::kConcat:
        symbol = nonempty && nullable(id) ? nonempty_concat(n) : concat(n);
        break;
      case Node::Kind::kAlt: {
        std::vector<Symbol> alts;
        for (int32_t k : n.kids) {
          if (const auto s = compile(k, nonempty)) alts.push_back(*s);
        }
        if (!alts.empty()) symbol = b_.choice(alts);
        break;
      }
      case Node::Kind::kRepeat:
        symbol = repeat(n, nonempty);
        break;
    }
    done = true;
    return symbol;
  }

  std::optional<Symbol> concat(const Node& n) {
    std::vector<Symbol> parts;
    for (int32_t k : n.kids) {
      const Node& kid = nodes_[static_cast<size_t>(k)];
      if (kid.single()) {
        for (char c : utf8(kid.set[0].first)) parts.push_back(b_.byte(static_cast<uint8_t>(c)));
      } else if (kid.kind != Node::Kind::kEmpty) {
        const auto s = compile(k, false);
        if (!s) return std::nullopt;
        parts.push_back(*s);
      }
    }
    return parts.empty() ? empty() : b_.sequence(parts);
  }

  // A nullable concatenation without "": the first character comes from some part i, the
  // parts before it match "", those after it anything.
  std::optional<Symbol> nonempty_concat(const Node& n) {
    std::vector<Symbol> alts;
    std::optional<Symbol> rest;
    for (size_t i = n.kids.size(); i-- > 0;) {
      if (const auto first = compile(n.kids[i], true)) {
        alts.push_back(rest ? b_.sequence({*first, *rest}) : *first);
      }
      if (i == 0) break;
      const Symbol all = *compile(n.kids[i], false);  // nullable, so not empty
      rest = rest ? b_.sequence({all, *rest}) : all;
    }
    if (alts.empty()) return std::nullopt;
    return b_.choice(alts);
  }

  // x{m,n}; when x matches "", x{m,n} is (x without ""){0,n}.
  std::optional<Symbol> repeat(const Node& n, bool nonempty) {
    const int32_t kid = n.kids[0];
    const bool kid_nullable = nullable(kid);
    const auto body = compile(kid, kid_nullable);
    const int64_t min = kid_nullable ? 0 : n.min;
    if (!body || n.max == 0) {
      if (min > 0 || nonempty) return std::nullopt;
      return empty();
    }
    return b_.repeat(*body, nonempty ? std::max<int64_t>(min, 1) : min, n.max);
  }

  Symbol empty() {
    if (!empty_) empty_ = b_.empty();
    return *empty_;
  }

  std::optional<Symbol> set(const Node& n) { return sets_.symbol(n.set); }

  GrammarBuilder& b_;
  std::string_view pattern_;
  const std::vector<Node>& nodes_;
  std::vector<std::array<std::pair<bool, std::optional<Symbol>>, 2>> memo_;
  std::vector<int8_t> nullable_;
  std::optional<Symbol> empty_;
  Utf8Sets sets_;
};

}  // namespace

Symbol regex_symbol(GrammarBuilder& b, std::string_view pattern) {
  Parser parser(pattern);
  const int32_t root = parser.parse();
  return Compiler(b, pattern, parser.nodes()).run(root);
}

std::shared_ptr<const Grammar> regex_grammar(std::string_view pattern) {
  GrammarBuilder b;
  return b.build(regex_symbol(b, pattern));
}

}  // namespace kvattn::structured
