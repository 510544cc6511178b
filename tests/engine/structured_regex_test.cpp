// regex_grammar: hand cases for every construct and error, then a differential test against
// PCRE2 (full matches with PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, and PCRE2's hard
// partial matches for which prefixes can still become a match) on random patterns and strings.
#include "engine/structured/regex_grammar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/matcher.h"
#include "kvattn/core/error.h"
#include "pcre_reference.h"

namespace kvattn::structured {
namespace {

using test::escaped;
using test::Pcre;

bool matches(std::string_view pattern, std::string_view s) {
  Matcher m(regex_grammar(pattern));
  return m.advance(s) && m.can_end();
}

std::string error_of(std::string_view pattern) {
  try {
    regex_grammar(pattern);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}


struct Case {
  std::string pattern;
  std::vector<std::string> accepted;
  std::vector<std::string> rejected;
};

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE("pattern " + escaped(c.pattern));
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = regex_grammar(c.pattern));
    for (const auto& s : c.accepted) {
      Matcher m(g);
      EXPECT_TRUE(m.advance(s) && m.can_end()) << "should accept '" << escaped(s) << "'";
    }
    for (const auto& s : c.rejected) {
      Matcher m(g);
      EXPECT_FALSE(m.advance(s) && m.can_end()) << "should reject '" << escaped(s) << "'";
    }
  }
}

TEST(StructuredRegex, Literals) {
  check({{"abc", {"abc"}, {"", "ab", "abcd", "abd", "ABC"}},
         {"", {""}, {"a", " "}},
         {"é€😀", {"é€😀"}, {"é€", "e€😀", "é€😀😀"}},
         {"^abc$", {"abc"}, {"^abc$", "abc\n", "abc$"}},
         {"\\Aab\\z", {"ab"}, {"Aabz"}},
         {"a{", {"a{"}, {"a"}},
         {"{\"k\": 1}", {"{\"k\": 1}"}, {"{\"k\":1}"}},
         {"x{a}]", {"x{a}]"}, {"x"}},
         {"é{2}😀+", {"éé😀", "éé😀😀😀"}, {"é😀", "é\xa9😀", "éé"}}});
}

TEST(StructuredRegex, Escapes) {
  check({{"\\d+", {"0", "123", "9"}, {"", "a", "١", "1a"}},
         {"\\D", {"a", "é", "😀", "\n"}, {"1", ""}},
         {"\\w+", {"a_Z9"}, {"-", "é", "a b"}},
         {"\\W", {"-", "é", " "}, {"_", "a", "Z", "5"}},
         {"\\s", {" ", "\t", "\n", "\r", "\f", "\v"}, {"a", "\u00a0", "  "}},
         {"\\S", {"a", "é", "😀"}, {" ", "\n"}},
         {"\\.\\\\\\/\\-\\[\\]\\(\\)\\{\\}\\*\\+\\?\\|\\^\\$\\,\\ \\#\\\"\\é",
          {".\\/-[](){}*+?|^$, #\"é"},
          {"a"}},
         {"\\n\\t\\r\\f\\v\\0", {std::string("\n\t\r\f\v\0", 6)}, {"\\n\\t\\r\\f\\v\\0"}},
         {"\\x41\\x{e9}\\u00e9\\u{1F600}\\uD83D\\uDE00\\x{10FFFF}", {"Aéé😀😀\U0010FFFF"}, {"A\xe9"}},
         {"\\xe9", {"é"}, {"\xe9"}},  // a code point, not a byte
         {".",
          {"a", "é", "€", "😀", "\r", "\U0010FFFF", std::string(1, '\0')},
          {"\n", "", "ab", "\xe9", "\xed\xa0\x80", "\xc0\x80", "\xe0\x80\x80", "\xf4\x90\x80\x80",
           "\xff"}}});
}

TEST(StructuredRegex, Classes) {
  check({{"[a-c_]", {"a", "b", "c", "_"}, {"d", "A", "", "ab"}},
         {"[^a-c]", {"d", "é", "\n", "😀", "\U0010FFFF"}, {"a", "c", "", "\xff", "\xed\xbf\xbf"}},
         {"[\\d\\s-]", {"5", " ", "-"}, {"a"}},
         {"[^\\d\\s]", {"a", "é"}, {"5", " "}},
         {"[\\D]", {"a", "é"}, {"5"}},
         {"[^\\W]", {"a", "_"}, {"é", "-"}},
         {"[é-ë]", {"é", "ê", "ë"}, {"è", "ì", "e"}},
         {"[\\u0800-\\uFFFF]",
          {"\u0800", "\uFFFF", "€", "\ue000", "\ud7ff"},
          {"\u07ff", "\U00010000"}},
         {"[\\x{10000}-\\x{10FFFF}]",
          {"😀", "\U0010FFFF", "\U00010000"},
          {"\uffff", "\xf4\x90\x80\x80"}},
         {"[\\x{7f}-\\x{80}\\x{7ff}-\\x{800}\\x{ffff}-\\x{10000}]",
          {"\x7f", "\u0080", "\u07ff", "\u0800", "\uffff", "\U00010000"},
          {"\x7e", "\u0081", "\u07fe", "\u0801", "\ufffe", "\U00010001"}},
         {"[^\\x00-\\x7F]", {"é", "😀"}, {"a", "\x7f"}},
         {"[]a]", {"]", "a"}, {"b"}},
         {"[^]a]", {"b"}, {"]", "a"}},
         {"[a-]", {"a", "-"}, {"b"}},
         {"[\\w-.]", {"a", "-", "."}, {"+"}},
         {"[a-\\d]", {"a", "-", "5"}, {"b"}},
         {"[\\b]", {"\b"}, {"b"}},
         {"[[]", {"["}, {"]"}},
         {"[.*+?(){}|$^]+", {".*+?(){}|$^"}, {"a"}},
         {"[\\]\\\\\\^\\-]", {"]", "\\", "^", "-"}, {"a"}}});
}

TEST(StructuredRegex, GroupsAndAlternation) {
  check({{"(ab|cd)+", {"ab", "abcd", "cdab"}, {"", "abc", "ac"}},
         {"(?:a|)b", {"ab", "b"}, {"a", "aab"}},
         {"(?P<year>\\d{4})-(?<m>\\d{2})-(?'d'\\d\\d)", {"2024-01-31"}, {"2024-1-31"}},
         {"a||b", {"a", "", "b"}, {"ab"}},
         {"()", {""}, {"a"}},
         {"(|)", {""}, {"a"}},
         {"^a|^b$|c$", {"a", "b", "c"}, {"", "ab"}},
         {"((a|b)(c|d))*", {"", "ac", "bdac"}, {"a", "acb"}}});
}

TEST(StructuredRegex, Quantifiers) {
  check({{"a*", {"", "a", "aaa"}, {"b"}},
         {"a+", {"a", "aa"}, {""}},
         {"a?", {"", "a"}, {"aa"}},
         {"a{3}", {"aaa"}, {"aa", "aaaa"}},
         {"a{2,}", {"aa", "aaaaa"}, {"a"}},
         {"a{1,3}", {"a", "aaa"}, {"", "aaaa"}},
         {"a{,2}", {"", "aa"}, {"aaa"}},
         {"a{0}b", {"b"}, {"ab"}},
         {"a{0,0}", {""}, {"a"}},
         {"a*?b", {"b", "aab"}, {"a"}},
         {"a+?", {"a", "aa"}, {""}},
         {"a{1,2}?", {"a", "aa"}, {"aaa"}},
         {"a*+b", {"b", "aab"}, {"a"}},  // possessive: read as greedy
         {"a++", {"a", "aa"}, {""}},
         {"a?+b", {"ab", "b"}, {"aab"}},
         {"(a*)*b", {"b", "aab"}, {"a"}},
         {"(a?){2,3}", {"", "a", "aaa"}, {"aaaa"}},
         {"(a*|b)+", {"", "ab", "bba"}, {"c"}},
         {"((a?)(b?))*c", {"c", "abbac"}, {"ab"}},
         {"(|a)*", {"", "aaa"}, {"b"}},
         {"(a|b?){0,2}c", {"c", "abc", "bc"}, {"abac"}},
         {"((a*)*)*", {"", "aaaa"}, {"b"}},
         {".{2}", {"é😀", "ab"}, {"a", "abc"}},
         {"(\\d{1,3}\\.){3}\\d{1,3}", {"192.168.0.1"}, {"192.168.0", "1234.1.1.1"}}});
}

TEST(StructuredRegex, Prefixes) {
  Matcher abc(regex_grammar("abc"));
  EXPECT_TRUE(abc.advance("ab"));
  EXPECT_TRUE(abc.can_continue());
  EXPECT_FALSE(abc.can_end());
  EXPECT_FALSE(abc.advance("d"));
  EXPECT_TRUE(abc.advance("c"));
  EXPECT_TRUE(abc.can_end());
  EXPECT_FALSE(abc.can_continue());

  Matcher e(regex_grammar("é"));
  EXPECT_TRUE(e.advance("\xc3"));
  EXPECT_TRUE(e.can_continue());
  EXPECT_FALSE(e.can_end());

  Matcher rep(regex_grammar("a{2,3}"));
  EXPECT_TRUE(rep.advance("aa"));
  EXPECT_TRUE(rep.can_end());
  EXPECT_TRUE(rep.can_continue());
  EXPECT_TRUE(rep.advance("a"));
  EXPECT_TRUE(rep.can_end());
  EXPECT_FALSE(rep.can_continue());

  Matcher dot(regex_grammar("."));
  EXPECT_FALSE(dot.advance("\xff"));
  EXPECT_FALSE(dot.advance("\xc0"));
  EXPECT_FALSE(dot.advance("\xf5"));
  EXPECT_TRUE(dot.advance("\xed"));  // ED 80..9F: below the surrogates
  EXPECT_FALSE(dot.advance("\xa0"));
  EXPECT_TRUE(dot.advance("\x9f"));
  EXPECT_TRUE(dot.can_continue());
  EXPECT_TRUE(dot.advance("\xbf"));
  EXPECT_TRUE(dot.can_end());

  Matcher neg(regex_grammar("[^a]"));
  EXPECT_TRUE(neg.advance("\xf0\x9f"));
  EXPECT_TRUE(neg.can_continue());
  EXPECT_FALSE(neg.advance("\x80\xff"));
}

TEST(StructuredRegex, SymbolInsideALargerGrammar) {
  GrammarBuilder b;
  const auto g =
      b.build(b.sequence({b.literal("x="), regex_symbol(b, "^\\d+(\\.\\d+)?$"), b.literal(";")}));
  Matcher ok(g);
  EXPECT_TRUE(ok.advance("x=3.14;") && ok.can_end());
  Matcher bad(g);
  EXPECT_FALSE(bad.advance("x=3.;"));
}

TEST(StructuredRegex, Errors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a(?=b)", "regex 'a(?=b)': lookahead at offset 1 is not supported"},
      {"(?!b)a", "negative lookahead at offset 0 is not supported"},
      {"(?<=a)b", "lookbehind at offset 0 is not supported"},
      {"(?<!a)b", "negative lookbehind at offset 0 is not supported"},
      {"(a)\\1", "backreference \\1 at offset 3 is not supported"},
      {"(?P<x>a)(?P=x)", "named backreference (?P= at offset 8 is not supported"},
      {"(?<x>a)\\k<x>", "named backreference \\k at offset 7 is not supported"},
      {"\\bfoo", "word boundary \\b at offset 0 is not supported"},
      {"a\\Bb", "word boundary \\B at offset 1 is not supported"},
      {"a^b", "anchor ^ at offset 1 is not supported"},
      {"a$b", "anchor $ at offset 1 is not supported"},
      {"(^a)", "anchor ^ at offset 1 is not supported"},
      {"(a$)", "anchor $ at offset 2 is not supported"},
      {"a\\zb", "anchor \\z at offset 1 is not supported"},
      {"(?i)abc", "inline flags (?i at offset 0 is not supported"},
      {"(?i:abc)", "inline flags (?i at offset 0 is not supported"},
      {"(?>a)", "atomic group (?> at offset 0 is not supported"},
      {"(?#x)a", "comment (?# at offset 0 is not supported"},
      {"(?R)", "recursion at offset 0 is not supported"},
      {"\\p{L}", "Unicode property \\p at offset 0 is not supported"},
      {"[[:alpha:]]", "POSIX class [:alpha:] at offset 1 is not supported"},
      {"\\01", "octal escape at offset 0 is not supported"},
      {"\\q", "escape \\q at offset 0 is not supported"},
      {"(ab", "missing ')' for the group opened at offset 0"},
      {"((a)", "missing ')' for the group opened at offset 0"},
      {"ab)", "unbalanced ')' at offset 2"},
      {"[abc", "unterminated character class opened at offset 0"},
      {"[]", "unterminated character class opened at offset 0"},
      {"[z-a]", "bad range z-a at offset 1"},
      {"[é-a]", "bad range é-a at offset 1"},
      {"a{3,1}", "repetition {3,1} at offset 1 has max below min"},
      {"*a", "quantifier '*' at offset 0 has nothing to repeat"},
      {"a|+b", "quantifier '+' at offset 2 has nothing to repeat"},
      {"(?:?)", "quantifier '?' at offset 3 has nothing to repeat"},
      {"^*", "quantifier '*' at offset 1 has nothing to repeat"},
      {"{2}", "quantifier '{' at offset 0 has nothing to repeat"},
      {"a**", "quantifier '*' at offset 2 follows another quantifier"},
      {"a{2}{3}", "quantifier '{' at offset 4 follows another quantifier"},
      {"a*?+", "quantifier '+' at offset 3 follows another quantifier"},
      {"a{2,x}", "malformed repetition at offset 1"},
      {"a{,}", "malformed repetition at offset 1"},
      {"a\\", "the pattern ends in a lone backslash"},
      {"\\xZZ", "malformed escape \\x at offset 0"},
      {"\\u12", "malformed escape \\u12 at offset 0"},
      {"\\x{}", "malformed escape \\x{ at offset 0"},
      {"\\x{110000}", "escape at offset 0 is past U+10FFFF"},
      {"\\uD800", "lone surrogate \\uD800 at offset 0"},
      {"\\uDE00\\uD83D", "lone surrogate \\uDE00 at offset 0"},
      {"a\xff", "invalid UTF-8 at offset 1"},
      {"\xc3", "invalid UTF-8 at offset 0"},
      {"\xed\xa0\x80", "invalid UTF-8 at offset 0"},
      {"(?<1a>x)", "malformed group name at offset 0"},
      {"(?<a", "malformed group name at offset 0"},
      {"[^\\x00-\\x{10FFFF}]", "matches no string"},
      {"[^\\s\\S]+", "matches no string"},
      {"(a{1000}){1000}", "repetition at offset 9 expands to more than 1048576 grammar elements"},
      {"a{99999999999999999999}", "repetition at offset 1 expands to more than"},
  };
  for (const auto& [pattern, message] : cases) {
    const std::string got = error_of(pattern);
    EXPECT_NE(got.find(message), std::string::npos)
        << "pattern " << escaped(pattern) << ": got '" << got << "', want '" << message << "'";
  }
  EXPECT_THROW(regex_grammar("(?=a)"), Error);
}

TEST(StructuredRegex, NoStringMatchingPartsAreDropped) {
  check({{"a|[^\\x00-\\x{10FFFF}]", {"a"}, {""}},
         {"a[^\\s\\S]*", {"a"}, {"aa"}},
         {"(?:[^\\s\\S]b)?c", {"c"}, {"bc"}}});
}

TEST(StructuredRegex, HostilePatternsThrowOrStayBounded) {
  const auto start = std::chrono::steady_clock::now();
  std::string deep = std::string(kMaxRegexDepth, '(') + "a" + std::string(kMaxRegexDepth, ')');
  EXPECT_TRUE(matches(deep, "a"));
  deep = "(" + deep + ")";
  EXPECT_NE(error_of(deep).find("groups nested deeper than 256"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '(')).find("nested deeper"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '[')).find("unterminated character class"),
            std::string::npos);
  EXPECT_THROW(regex_grammar("((a{100}){100}){100}"), Error);
  EXPECT_THROW(regex_grammar("(((a*){1000}){1000})*"), Error);
  EXPECT_THROW(regex_grammar(".{2000000}"), Error);
  EXPECT_THROW(regex_grammar("a{1048576,}"), Error);
  EXPECT_TRUE(matches("a{100000}", std::string(100000, 'a')));
  EXPECT_FALSE(matches("a{100000}", std::string(99999, 'a')));
  EXPECT_TRUE(matches("[^a]{0,1000}b", std::string(1000, 'c') + "b"));
  EXPECT_TRUE(matches("(((((a*)*)*)*)*)*b", std::string(200, 'a') + "b"));
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "[^" + std::to_string(i % 10) + "]é|";
  EXPECT_TRUE(matches(many + "x", "x"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 20.0);
}

TEST(StructuredRegex, ArbitraryInputBuildsOrThrowsError) {
  // Pattern-shaped noise: every outcome must be a grammar or a kvattn::Error (ASan and UBSan
  // watch the rest).
  const std::string alphabet = "()[]{}|*+?.^$\\-,:=!<>#&'PRdDwWsSbBxuUkpz0129aAfF_ \xc3\xa9\xff";
  std::mt19937 rng(7);
  int built = 0, threw = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string p;
    for (int n = static_cast<int>(rng() % 14); n > 0; --n) p += alphabet[rng() % alphabet.size()];
    try {
      Matcher m(regex_grammar(p));
      m.advance(p);
      ++built;
    } catch (const Error&) {
      ++threw;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "pattern " << escaped(p) << " threw a non-kvattn error: " << e.what();
    }
  }
  EXPECT_GT(built, 1000);
  EXPECT_GT(threw, 1000);
}

// ---- Differential test against PCRE2 ----

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    const auto cp = static_cast<uint32_t>(c);
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += {static_cast<char>(0xC0 | cp >> 6), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
      out += {static_cast<char>(0xE0 | cp >> 12), static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
              static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
      out += {static_cast<char>(0xF0 | cp >> 18), static_cast<char>(0x80 | (cp >> 12 & 0x3F)),
              static_cast<char>(0x80 | (cp >> 6 & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
  }
  return out;
}

// Characters patterns and strings are made of: ASCII letters, digits, specials and spaces, and
// the edges of each UTF-8 length.
const std::vector<char32_t> kAlphabet = {
    'a',    'b',    'c',    '0',    '7',    '_',     '-',     '.',     ' ',   '\n',
    '\t',   '{',    '}',    '*',    '[',    ']',     '\\',    '^',     '$',   '(',
    ')',    '|',    '?',    '+',    0x7F,   0x80,    0xE9,    0x5D0,   0x7FF, 0x800,
    0x20AC, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};

// A random pattern as a tree: sampled for strings likely to match, rendered twice (PCRE2 has
// no \u, possessive forms or {,n}; ours gets those, PCRE2 the equivalent).
struct Re {
  enum class Kind { kLit, kDot, kEscape, kClass, kGroup } kind = Kind::kLit;
  char32_t cp = 0;
  char escape = 0;
  bool negated = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::string escapes;
  std::vector<std::vector<Re>> alts;
  int min = 1, max = 1;  // max < 0: unbounded
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(int percent) { return pick(100) < percent; }
  char32_t any_char() {
    return kAlphabet[static_cast<size_t>(pick(static_cast<int>(kAlphabet.size())))];
  }
  char32_t letter() {
    return chars_.empty() || chance(20)
               ? any_char()
               : chars_[static_cast<size_t>(pick(static_cast<int>(chars_.size())))];
  }

  std::vector<std::vector<Re>> pattern() {
    chars_.clear();
    for (int i = 0; i < 3; ++i) chars_.push_back(any_char());
    return alternation(0);
  }
  void render(const std::vector<std::vector<Re>>& alts, bool top, std::string& ours,
              std::string& pcre) {
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) ours += '|', pcre += '|';
      if (top && chance(15)) ours += chance(80) ? "^" : "\\A", pcre += '^';
      for (const Re& r : alts[i]) render(r, ours, pcre);
      // PCRE2's $ also matches before a final newline, which its partial matches see.
      if (top && chance(15)) ours += chance(80) ? "$" : "\\z", pcre += "\\z";
    }
  }
  void sample(const std::vector<std::vector<Re>>& alts, std::u32string& out) {
    for (const Re& r : alts[static_cast<size_t>(pick(static_cast<int>(alts.size())))]) {
      const int n = r.max < 0 ? r.min + pick(3) : r.min + pick(r.max - r.min + 1);
      for (int i = 0; i < n; ++i) sample(r, out);
    }
  }
  std::u32string mutated(std::u32string s) {
    const int n = 1 + pick(2);
    for (int i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(pick(static_cast<int>(s.size()) + 1));
      switch (pick(3)) {
        case 0:
          s.insert(s.begin() + static_cast<ptrdiff_t>(at), letter());
          break;
        case 1:
          if (at < s.size()) s.erase(at, 1);
          break;
        default:
          if (at < s.size()) s[at] = letter();
          break;
      }
    }
    return s;
  }
  std::u32string random_string() {
    std::u32string s;
    for (int n = pick(7); n > 0; --n) s += letter();
    return s;
  }

 private:
  std::vector<std::vector<Re>> alternation(int depth) {
    std::vector<std::vector<Re>> alts(static_cast<size_t>(chance(60) ? 1 : 2 + pick(2)));
    for (auto& alt : alts) {
      const int n = chance(8) ? 0 : 1 + pick(3);
      for (int i = 0; i < n; ++i) alt.push_back(atom(depth));
    }
    return alts;
  }
  Re atom(int depth) {
    Re r;
    const int k = pick(100);
    if (k < 40 || (depth >= 3 && k >= 75)) {
      r.cp = letter();
    } else if (k < 45) {
      r.kind = Re::Kind::kDot;
    } else if (k < 53) {
      r.kind = Re::Kind::kEscape;
      r.escape = "dDwWsS"[pick(6)];
    } else if (k < 75) {
      r.kind = Re::Kind::kClass;
      r.negated = chance(30);
      for (int n = 1 + pick(3); n > 0; --n) {
        if (chance(15)) {
          // A negated class may not hold \D \W \S: [^\W0-z] matches nothing, which
          // PCRE2's partial matches cannot see.
          r.escapes += r.negated ? "dws"[pick(3)] : "dDwWsS"[pick(6)];
          continue;
        }
        char32_t lo = letter(), hi = chance(40) ? letter() : lo;
        if (hi < lo) std::swap(lo, hi);
        r.ranges.emplace_back(lo, hi);
      }
    } else {
      r.kind = Re::Kind::kGroup;
      r.alts = alternation(depth + 1);
    }
    if (chance(35)) {
      switch (pick(6)) {
        case 0:
          r.min = 0, r.max = -1;
          break;
        case 1:
          r.min = 1, r.max = -1;
          break;
        case 2:
          r.min = 0, r.max = 1;
          break;
        case 3:
          r.min = r.max = pick(3);
          break;
        case 4:
          r.min = pick(3), r.max = -1;
          break;
        default:
          r.min = pick(3), r.max = r.min + pick(3);
          break;
      }
    }
    return r;
  }

  void literal(char32_t cp, bool in_class, std::string& ours, std::string& pcre) {
    // PCRE2 reads [.x.] as a POSIX collating element, so a class escapes its dots.
    const std::string special = in_class ? "\\]^-[." : "\\^$.|?*+()[]{}";
    if (cp < 0x80 && special.find(static_cast<char>(cp)) != std::string::npos) {
      ours += {'\\', static_cast<char>(cp)};
      pcre += {'\\', static_cast<char>(cp)};
      return;
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "%X", static_cast<unsigned>(cp));
    const std::string braced = std::string("\\x{") + hex + "}";
    switch (pick(6)) {
      case 0:
        ours += braced;
        break;
      case 1:
        ours += std::string("\\u{") + hex + "}";
        break;
      case 2:
        if (cp < 0x10000) {
          std::snprintf(hex, sizeof hex, "\\u%04X", static_cast<unsigned>(cp));
        } else {
          const unsigned v = static_cast<unsigned>(cp) - 0x10000;
          std::snprintf(hex, sizeof hex, "\\u%04X\\u%04X", 0xD800 + (v >> 10),
                        0xDC00 + (v & 0x3FF));
        }
        ours += hex;
        break;
      default:
        if (cp == '\n' || cp == '\t') {
          ours += cp == '\n' ? "\\n" : "\\t";
        } else {
          ours += utf8(std::u32string(1, cp));
        }
        pcre += utf8(std::u32string(1, cp));
        return;
    }
    pcre += braced;
  }
  void render(const Re& r, std::string& ours, std::string& pcre) {
    switch (r.kind) {
      case Re::Kind::kLit:
        literal(r.cp, false, ours, pcre);
        break;
      case Re::Kind::kDot:
        ours += '.', pcre += '.';
        break;
      case Re::Kind::kEscape:
        ours += {'\\', r.escape}, pcre += {'\\', r.escape};
        break;
      case Re::Kind::kClass:
        ours += r.negated ? "[^" : "[", pcre += r.negated ? "[^" : "[";
        for (char e : r.escapes) ours += {'\\', e}, pcre += {'\\', e};
        for (auto [lo, hi] : r.ranges) {
          literal(lo, true, ours, pcre);
          if (hi != lo) ours += '-', pcre += '-', literal(hi, true, ours, pcre);
        }
        ours += ']', pcre += ']';
        break;
      case Re::Kind::kGroup: {
        std::string open;
        switch (pick(4)) {
          case 0:
            open = "(";
            break;
          case 1:
            open = "(?:";
            break;
          case 2:
            open = "(?<g" + std::to_string(names_++) + ">";
            break;
          default:
            open = "(?P<g" + std::to_string(names_++) + ">";
            break;
        }
        ours += open, pcre += open;
        render(r.alts, false, ours, pcre);
        ours += ')', pcre += ')';
        break;
      }
    }
    if (r.min == 1 && r.max == 1) return;
    std::string q;
    if (r.min == 0 && r.max < 0)
      q = "*";
    else if (r.min == 1 && r.max < 0)
      q = "+";
    else if (r.min == 0 && r.max == 1)
      q = "?";
    else if (r.max < 0)
      q = "{" + std::to_string(r.min) + ",}";
    else if (r.min == r.max)
      q = "{" + std::to_string(r.min) + "}";
    else
      q = "{" + std::to_string(r.min) + "," + std::to_string(r.max) + "}";
    pcre += q;
    if (q.starts_with("{0,") && q.size() > 4 && chance(30))
      q = "{," + q.substr(3);  // Python's {,n}
    ours += q;
    if (chance(20))
      ours += '?', pcre += '?';  // lazy
    else if (chance(10))
      ours += '+';  // possessive, read as greedy
  }
  void sample(const Re& r, std::u32string& out) {
    switch (r.kind) {
      case Re::Kind::kLit:
        out += r.cp;
        break;
      case Re::Kind::kDot:
        out += letter();
        break;
      case Re::Kind::kEscape:
        out += std::u32string(U"0a \xe9\xe9\xe9").at(static_cast<size_t>(pick(6)));
        break;
      case Re::Kind::kClass: {
        if (r.negated || r.ranges.empty() || chance(10)) {
          out += letter();
          break;
        }
        const auto [lo, hi] =
            r.ranges[static_cast<size_t>(pick(static_cast<int>(r.ranges.size())))];
        char32_t c =
            lo + static_cast<char32_t>(std::uniform_int_distribution<uint32_t>(0, hi - lo)(rng_));
        if (chance(30)) c = hi;
        out += c >= 0xD800 && c < 0xE000 ? lo : c;
        break;
      }
      case Re::Kind::kGroup:
        sample(r.alts, out);
        break;
    }
  }

  std::mt19937 rng_;
  std::vector<char32_t> chars_;  // this pattern's favourite characters
  int names_ = 0;
};

TEST(StructuredRegex, MatchesPcre2OnRandomPatterns) {
  const auto start = std::chrono::steady_clock::now();
  Generator gen(20240611);
  int patterns = 0, strings = 0, full = 0, prefixes = 0, skipped = 0, failures = 0;
  for (int p = 0; p < 3000 && failures < 5; ++p) {
    const auto tree = gen.pattern();
    std::string ours, theirs;
    gen.render(tree, true, ours, theirs);
    SCOPED_TRACE("pattern " + escaped(ours) + "  (PCRE2: " + escaped(theirs) + ")");
    const Pcre pcre(theirs);
    ASSERT_EQ(pcre.error(), "");
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = regex_grammar(ours));
    ++patterns;
    for (int i = 0; i < 24; ++i) {
      std::u32string s;
      if (i < 10) {
        gen.sample(tree, s);
      } else if (i < 18) {
        gen.sample(tree, s);
        s = gen.mutated(std::move(s));
      } else {
        s = gen.random_string();
      }
      ++strings;
      // Code point by code point: alive after the prefix <=> PCRE2 finds a (hard partial)
      // match of it, which means it can still be completed. (PCRE2 reports no partial match
      // of "" before it inspects a character, so the empty prefix is left out.)
      Matcher m(g);
      bool alive = true;
      for (size_t k = 1; k <= s.size(); ++k) {
        for (char c : utf8(s.substr(k - 1, 1))) alive = alive && m.advance(std::string_view(&c, 1));
        const std::string prefix = utf8(s.substr(0, k));
        const int rc = pcre.prefix(prefix);
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
          ++skipped;
          continue;
        }
        ASSERT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) << rc;
        const bool viable = rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
        ++prefixes;
        if (alive != viable) {
          ADD_FAILURE() << "prefix '" << escaped(prefix) << "': matcher "
                        << (alive ? "alive" : "dead") << ", PCRE2 "
                        << (viable ? "viable" : "no match");
          ++failures;
          break;
        }
      }
      const std::string bytes = utf8(s);
      const int rc = pcre.full(bytes);
      if (rc == PCRE2_ERROR_MATCHLIMIT) {
        ++skipped;
        continue;
      }
      ASSERT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH) << rc;
      if ((alive && m.can_end()) != (rc >= 0)) {
        ADD_FAILURE() << "string '" << escaped(bytes) << "': matcher " << (alive && m.can_end())
                      << ", PCRE2 " << (rc >= 0);
        ++failures;
      }
      if (rc < 0) continue;
      ++full;
      // Every byte prefix of a match, even inside a character, can continue.
      Matcher bytewise(g);
      for (size_t k = 0; k < bytes.size(); ++k) {
        ASSERT_TRUE(bytewise.can_continue()) << "after '" << escaped(bytes.substr(0, k)) << "'";
        ASSERT_TRUE(bytewise.advance(bytes.substr(k, 1)))
            << "at byte " << k << " of '" << escaped(bytes) << "'";
      }
      ASSERT_TRUE(bytewise.can_end());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "regex vs PCRE2: %d patterns, %d strings (%d full matches), %d prefixes, %d skipped (PCRE2's "
      "match limit), %.2f s\n",
      patterns, strings, full, prefixes, skipped, seconds);
  EXPECT_EQ(failures, 0);
  EXPECT_GT(full, strings / 5);
  EXPECT_LT(skipped, strings / 100);  // the generator must reach matches, not only rejections
}

}  // namespace
}  // namespace kvattn::structured
