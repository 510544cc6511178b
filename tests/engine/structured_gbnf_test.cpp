// gbnf_grammar: llama.cpp's example grammars, every construct and error, hostile inputs, and a
// differential test against PCRE2 on random regular (recursion-free) GBNF grammars, rendered
// once as GBNF and once as the equivalent PCRE2 pattern (rule references inlined).
#include "engine/structured/gbnf_grammar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/code_points.h"
#include "engine/structured/matcher.h"
#include "kvattn/core/error.h"
#include "pcre_reference.h"

namespace kvattn::structured {
namespace {

using test::escaped;
using test::Pcre;


bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  Matcher m(g);
  return m.advance(s) && m.can_end();
}

std::string error_of(std::string_view text) {
  try {
    gbnf_grammar(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A grammar and strings it must accept, reject, and prefixes that must (not) be able to go on.
struct Case {
  std::string grammar;
  std::vector<std::string> accepted;
  std::vector<std::string> rejected;
  std::vector<std::string> live_prefixes = {};
  std::vector<std::string> dead_prefixes = {};
};

void check(const Case& c) {
  SCOPED_TRACE("grammar:\n" + c.grammar);
  std::shared_ptr<const Grammar> g;
  ASSERT_NO_THROW(g = gbnf_grammar(c.grammar));
  for (const auto& s : c.accepted)
    EXPECT_TRUE(accepts(g, s)) << "should accept '" << escaped(s) << "'";
  for (const auto& s : c.rejected)
    EXPECT_FALSE(accepts(g, s)) << "should reject '" << escaped(s) << "'";
  for (const auto& s : c.live_prefixes) {
    Matcher m(g);
    EXPECT_TRUE(m.advance(s) && m.can_continue()) << "'" << escaped(s) << "' should go on";
  }
  for (const auto& s : c.dead_prefixes) {
    Matcher m(g);
    EXPECT_FALSE(m.advance(s) && m.can_continue()) << "'" << escaped(s) << "' should be dead";
  }
}

// ---- llama.cpp's grammars/*.gbnf ----

TEST(StructuredGbnf, ArithmeticExample) {
  check({R"gbnf(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)gbnf",
         {"1+2=3\n", "x = y\n", "(a +b_1) *7=z\nq=1\n", "((1))=2\n"},
         {"", "1+2=3", "1+=3\n", "(1=2\n", "A=1\n", "1 2=3\n", "a+ b=1\n"},
         {"(((", "a+", "1=2\n", "1=2\n\n"},
         {"+", ")", "1=2\n=", "a+ "}});
}

const char* const kJson = R"gbnf(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

TEST(StructuredGbnf, JsonExample) {
  check({kJson,
         {"{}", R"({"a": 1, "b": [true, null, -0.5e+3], "c": {"d": "x\"\u00e9y"}})",
          "{ \"k\" :\n    \"\xe2\x82\xac\" }", R"({"n": 1234567890123456})"},
         {"", "[]", R"({"a" 1})", R"({"a": 01})", R"({"a": "\x"})", "{\"a\": \"\x01\"}",
          R"({"a": tru})", R"({"a": 1,})", "{\"a\": \"\xff\"}"},
         {"{\"", R"({"a": [1, {"b": )", "{\"\xe2\x82"},
         {"{\"\x7f", "{}}", "{\"a\"::"}});
}

TEST(StructuredGbnf, ChessExample) {
  check({R"gbnf(# Specifies chess moves as a list in algebraic notation, using PGN conventions

# Force first move to "1. ", then any 1-2 digit number after, relying on model to follow the pattern
root    ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")+
move    ::= (pawn | nonpawn | castle) [+#]?

# piece type, optional file/rank, optional capture, dest file & rank
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]

# optional file & capture, dest file & rank, optional promotion
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?

castle  ::= "O-O" "-O"?
)gbnf",
         {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8+\n10. exd8=Q# a1\n"},
         {"1. e4 e5\n", "1. e9 e5\n2. a1 a1\n", "1. e4 e5\n0. a1 a1\n"},
         {"1. e4 e5\n2. ", "1. O-O"},
         {"2.", "1. e4  "}});
}

TEST(StructuredGbnf, ListExample) {
  check({R"gbnf(root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)gbnf",
         {"- a\n", "- milk \xc3\xa9\n- eggs\n"},
         {"", "- \n", "- a", "- a\x0b\n", "- a\xc2\x85\n", "- a\xe2\x80\xa8\n", "-a\n", "- \xff\n"},
         {"- a", "- \xe2\x80"},
         {"- \xe2\x80\xa8", "- \xc0"}});
}

TEST(StructuredGbnf, JapaneseExample) {
  check({R"gbnf(# A probably incorrect grammar for Japanese
root        ::= jp-char+ ([ \t\n] jp-char+)*
jp-char     ::= hiragana | katakana | punctuation | cjk
hiragana    ::= [ぁ-ゟ]
katakana    ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk         ::= [一-鿿]
)gbnf",
         {"こんにちは", "カタカナ、漢字。 ひらがな", "日本語\tです"},
         {"", "abc", "こんにちは ", "こ  ん", "こ\xff"},
         {"こんにちは ", "\xe3\x81"},
         {"a", "\xe3\x80\x80"}});  // U+3000 (ideographic space) is below 、
}

// ---- Constructs ----

TEST(StructuredGbnf, LiteralsAndEscapes) {
  check({R"gbnf(root ::= "a\"b\\c\n\r\t\[\]" "\x41\u00e9\U0001F600" "€")gbnf",
         {"a\"b\\c\n\r\t[]A\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac"},
         {"a\"b\\c"}});
  check({"root ::= \"\\xff\"", {"\xc3\xbf"}, {"\xff"}});  // \xff is U+00FF, not the byte
  check({"root ::= \"\" \"x\" \"\"", {"x"}, {"", "xx"}});
  check({"root ::= \"a\nb\"", {"a\nb"}, {"ab"}});  // a raw line break inside a literal
}

TEST(StructuredGbnf, Classes) {
  check({"root ::= [a-cx\\]-]", {"a", "b", "c", "x", "]", "-"}, {"d", "", "ab"}});
  check({"root ::= [a-] [-z]", {"az", "-z", "a-", "--"}, {"bz"}});
  check({"root ::= [^a-z\\n]",
         {"A", "\t", "\xc3\xa9", "\xf4\x8f\xbf\xbf"},
         {"a", "\n", "", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "AB"}});
  check({"root ::= [\\x00-\\U0010FFFF]",
         {std::string(1, '\0'), "\xf4\x8f\xbf\xbf"},
         {"\xed\xa0\x80", "\x80"}});
  check({"root ::= [é-ê\\u0100]", {"\xc3\xa9", "\xc3\xaa", "\xc4\x80"}, {"\xc3\xa8", "e"}});
}

TEST(StructuredGbnf, AnyCharacter) {
  check({"root ::= . .",
         {"ab", "\n\n", "\xc3\xa9\xf0\x9f\x98\x80"},
         {"a", "abc", "a\xff", "a\xc3", "a\xed\xa0\x80", "a\xc0\xaf"}});
}

TEST(StructuredGbnf, GroupsAlternationAndRepetition) {
  check({"root ::= (\"a\" | \"b\" \"c\" | ) \"d\"", {"ad", "bcd", "d"}, {"bd", "abd"}});
  check({"root ::= \"ab\"* \"c\"+ \"d\"?", {"c", "ababccd", "abcc"}, {"abd", "ac", "cdd"}});
  check({"root ::= \"a\"{3}", {"aaa"}, {"aa", "aaaa"}});
  check({"root ::= \"a\"{2,}", {"aa", "aaaaa"}, {"a"}});
  check({"root ::= \"a\"{1,3} \"b\"{,2} \"c\"{ 0 , 1 }",
         {"a", "aaabbc", "abb"},
         {"", "aaaa", "abbb", "acc"}});
  check({"root ::= \"a\"{0} \"b\"", {"b"}, {"ab"}});
  check({"root ::= \"ab\"{2}{3}", {"abababababab"}, {"ababababab"}});
  check({"root ::= (\"a\"?){3} \"b\"", {"b", "aab", "aaab"}, {"aaaab"}});
  check({"root ::= (\"a\"+)* \"b\"", {"b", "aaab"}, {"a"}});
}

TEST(StructuredGbnf, RulesCommentsAndLayout) {
  // Use before definition, recursion, names with digits and dashes, CRLF, comments, rules
  // going on inside ( ) and after | or ::=, a later definition replacing an earlier one.
  check(
      {"# comment\r\nroot ::= list-2 # trailing\r\n\r\nlist-2 ::= \"(\" (\r\n  item\r\n"
       "  (\",\" item)* # more\r\n)? \")\"\r\nitem ::= list-2 |\r\n  [0-9]\r\n"
       "item ::= list-2 | [a-z]\n",
       {"()", "(a,(b,()),c)", "((((x))))"},
       {"(1)", "(a,)", "("}});
  check({"root ::=\n  \"a\"\n", {"a"}, {""}});
  check({"root ::= \"x\"\rother ::= \"y\"", {"x"}, {"y"}});
  check({"root ::= \"a\" | \n \"b\"", {"a", "b"}, {""}});
  check({"root ::= a\na ::= \"1\" a | \"\"", {"", "1", "111"}, {"2"}});
}

TEST(StructuredGbnf, Errors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "line 1, column 1: no rule named 'root'"},
      {"# only a comment\n", "line 2, column 1: no rule named 'root'"},
      {"a ::= \"x\"", "no rule named 'root'"},
      {"root ::= foo\n", "line 1, column 10: undefined rule 'foo'"},
      {"root ::= a\na ::= b c\nc ::= \"x\"", "line 2, column 7: undefined rule 'b'"},
      {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
      {"root ::= \"é\" [abc", "line 1, column 14: unterminated character class"},
      {"root ::= (\"a\" | \"b\"\n",
       "line 2, column 1: expected ')' to close the group opened "
       "at line 1, column 10, found the end of the text"},
      {"root ::= (\"a\" ]", "line 1, column 15: expected ')'"},
      {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "line 1, column 11: escape '\\x' needs 2 hex digits"},
      {"root ::= [\\u12G4]", "escape '\\u' needs 4 hex digits"},
      {"root ::= \"\\uD800\"", "is not a Unicode scalar value"},
      {"root ::= \"\\U00110000\"", "is not a Unicode scalar value"},
      {"root ::= \"\\", "the text ends inside an escape"},
      {"root ::= \"\xff\"", "line 1, column 11: invalid UTF-8 (byte 0xff)"},
      {"root ::= [z-a]", "line 1, column 11: range 'z-a' has its end below its start"},
      {"root ::= []", "empty character class"},
      {"root ::= [^\\x00-\\U0010FFFF]", "character class matches no character"},
      {"root ::= \"a\"{2,1}", "line 1, column 13: bad repetition bounds {2,1}"},
      {"root ::= \"a\"{}", "line 1, column 14: expected a number in the repetition"},
      {"root ::= \"a\"{,}", "repetition '{,}' needs a bound"},
      {"root ::= \"a\"{2", "expected '}' to close the repetition, found the end of the text"},
      {"root ::= \"a\"{99999999999999999999}", "repetition count 1048577 is too large"},
      {"root ::= * \"a\"", "line 1, column 10: '*' has nothing to repeat"},
      {"root ::= (| \"a\")+", "'+' repeats an item that matches the empty string"},
      {"root ::= \"\"*", "'*' repeats an item that matches the empty string"},
      {"root ::= \"a\" )", "line 1, column 14: unexpected ')' in the rule 'root'"},
      {"root ::= \"a\"\n  | \"b\"",
       "line 2, column 3: expected a rule name, found '|' (a rule "
       "goes on to the next line only inside ( ) or after"},
      {"root ::=\nnext ::= \"a\"",
       "line 2, column 6: unexpected ':' in the rule 'root' (a rule "
       "goes on past a line break after '::='"},
      {"root = \"a\"", "line 1, column 6: expected '::=' after the rule name 'root', found '='"},
      {"\xc3\xa9 ::= \"a\"", "line 1, column 1: expected a rule name, found '\xc3\xa9'"},
      {"root ::= \"ab\"\n r\xc3\xa9 ::= x",
       "line 2, column 3: expected '::=' after the rule "
       "name 'r', found '\xc3\xa9'"},
      {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "'expr' is left-recursive"},
      {"root ::= w*\nw ::= \" \"?", "is left-recursive"},
  };
  for (const auto& [text, message] : cases) {
    const std::string got = error_of(text);
    EXPECT_EQ(got.find("gbnf: "), 0u) << escaped(text) << ": " << got;
    EXPECT_NE(got.find(message), std::string::npos)
        << "grammar " << escaped(text) << ": got '" << got << "', want '" << message << "'";
  }
}

TEST(StructuredGbnf, HostileInputsThrowOrStayBounded) {
  const auto start = std::chrono::steady_clock::now();
  const auto nested = [](int n) {
    return "root ::= " + std::string(static_cast<size_t>(n), '(') + "\"a\"" +
           std::string(static_cast<size_t>(n), ')');
  };
  EXPECT_TRUE(accepts(gbnf_grammar(nested(kMaxGbnfDepth)), "a"));
  EXPECT_NE(error_of(nested(kMaxGbnfDepth + 1)).find("groups nested deeper than 256"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(100000, '(')).find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(100000, '[')).find("unterminated"),
            std::string::npos);
  EXPECT_THROW(gbnf_grammar("root ::= ((\"a\"{100}){100}){100}"), Error);
  EXPECT_THROW(gbnf_grammar("root ::= \"a\"{1000}{1000}"), Error);
  EXPECT_THROW(gbnf_grammar("root ::= ((\"a\"{0,1000}){0,1000})*"), Error);
  EXPECT_THROW(gbnf_grammar("root ::= .{2000000}"), Error);
  EXPECT_THROW(gbnf_grammar("root ::= \"a\"{1048576,}"), Error);
  const auto big = gbnf_grammar("root ::= \"a\"{100000}");
  EXPECT_TRUE(accepts(big, std::string(100000, 'a')));
  EXPECT_FALSE(accepts(big, std::string(99999, 'a')));
  EXPECT_TRUE(accepts(gbnf_grammar("root ::= \"a\"" + std::string(300, '?')), "a"));
  EXPECT_NE(error_of("root ::= \"a\"" + std::string(100000, '?'))
                .find("line 1, column 1: rule 'root' nests too many rules deep"),
            std::string::npos);
  // The most rule names allowed, as a chain.
  std::string chain = "root ::= r0\n";
  for (size_t i = 0; i + 2 < kMaxGbnfRules; ++i) {
    chain += "r" + std::to_string(i) + " ::= \"a\" r" + std::to_string(i + 1) + " | \"\"\n";
  }
  const std::string last = "r" + std::to_string(kMaxGbnfRules - 2);
  EXPECT_TRUE(accepts(gbnf_grammar(chain + last + " ::= \"b\""), "aaa"));
  EXPECT_NE(error_of(chain + last + " ::= x").find("more than 4096 rule names"), std::string::npos);
  // Rules nested deep before a character, and paths into one doubling per rule: the work a
  // matcher would do per byte.
  std::string deep = "root ::= d0\n";
  for (int i = 0; i < 1200; ++i) {
    deep += "d" + std::to_string(i) + " ::= d" + std::to_string(i + 1) + " \"a\"?\n";
  }
  EXPECT_NE(error_of(deep + "d1200 ::= \"b\"")
                .find("line 1, column 1: rule 'root' nests too many "
                      "rules deep before its first character"),
            std::string::npos);
  std::string doubling = "root ::= x1\nx1 ::= \"x\"\n";
  for (int i = 2; i <= 40; ++i) {
    doubling += "x" + std::to_string(i) + " ::= x" + std::to_string(i - 1) + " | x" +
                std::to_string(i - 1) + " \"y\"\n";
  }
  EXPECT_NE(error_of(doubling).find("can begin in too many ways"), std::string::npos);
  std::string many = "root ::= ";
  for (int i = 0; i < 20000; ++i) many += "[^" + std::to_string(i % 10) + "] \"é\" | ";
  EXPECT_TRUE(accepts(gbnf_grammar(many + "\"x\""), "x"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 30.0);
}

// Every outcome is a grammar (which a Matcher then runs over the text) or a kvattn::Error
// (ASan and UBSan watch the rest): GBNF-shaped noise, then 100k-byte chunks of random bytes.
TEST(StructuredGbnf, ArbitraryInputBuildsOrThrowsError) {
  const std::vector<std::string> pieces = {
      "root", " ::= ", "::=",     "a",   "b-1", "\n",    "\r\n", " ",    "|",    "(",
      ")",    "*",     "+",       "?",   "{2}", "{1,3}", "{,2}", "{2,}", "{",    "}",
      ",",    "\"",    "\"x\"",   "[",   "]",   "[^",    "-",    "^",    ".",    "#",
      "\\",   "\\x41", "\\u00e9", "\\n", "\\q", "é",     "\xff", "0",    "\"\"", "a ::= "};
  std::mt19937 rng(11);
  int built = 0, threw = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = i % 2 ? "root ::= " : "";
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) text += pieces[rng() % pieces.size()];
    try {
      Matcher m(gbnf_grammar(text));
      m.advance(text);
      ++built;
    } catch (const Error&) {
      ++threw;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "grammar " << escaped(text) << " threw a non-kvattn error: " << e.what();
    }
  }
  EXPECT_GT(built, 1000);
  EXPECT_GT(threw, 1000);
  for (int chunk = 0; chunk < 8; ++chunk) {
    std::string text(100000, '\0');
    for (char& c : text) c = static_cast<char>(rng());
    if (chunk % 2) text = "root ::= " + text;
    EXPECT_THROW(gbnf_grammar(text), Error);
  }
}

// ---- Differential test against PCRE2 ----

std::string utf8_of(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) out += utf8(static_cast<uint32_t>(c));
  return out;
}

// GBNF's special characters, the edges of each UTF-8 length, and a few letters.
const std::vector<char32_t> kAlphabet = {
    'a',  'b',  'c', '0',  '-',  '"',  '\\',  '[',   ']',    '^',    '(',     '|',     '.',     '#',
    '\n', '\t', ' ', 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0x20AC, 0xFFFD, 0x10000, 0x1F600, 0x10FFFF};

// One item of a random recursion-free grammar: rule i refers only to rules after it.
struct Expr {
  enum class Kind { kLit, kClass, kDot, kGroup, kRef } kind = Kind::kLit;
  std::u32string text;                                // kLit
  bool negated = false;                               // kClass
  std::vector<std::pair<char32_t, char32_t>> ranges;  // kClass
  std::vector<std::vector<Expr>> alts;                // kGroup
  size_t rule = 0;                                    // kRef
  int min = 1, max = 1;                               // max < 0: unbounded
  bool nullable = false;                              // with its quantifier
};
using Alts = std::vector<std::vector<Expr>>;

class GrammarGenerator {
 public:
  explicit GrammarGenerator(uint32_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(int percent) { return pick(100) < percent; }
  char32_t letter() {
    return chars_.empty() || chance(20)
               ? kAlphabet[static_cast<size_t>(pick(static_cast<int>(kAlphabet.size())))]
               : chars_[static_cast<size_t>(pick(static_cast<int>(chars_.size())))];
  }

  // A new grammar: rules built last to first, so that each knows which of its references match "".
  void make() {
    chars_.clear();
    for (int i = 0; i < 4; ++i)
      chars_.push_back(kAlphabet[static_cast<size_t>(pick(static_cast<int>(kAlphabet.size())))]);
    rules_.assign(static_cast<size_t>(1 + pick(3)), {});
    nullable_.assign(rules_.size(), false);
    for (size_t r = rules_.size(); r-- > 0;) {
      current_ = r;
      rules_[r] = alternatives(0);
      nullable_[r] = nullable(rules_[r]);
    }
  }
  // The rules in a random order, root first or not.
  std::string gbnf() {
    std::vector<size_t> order(rules_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    std::string out = chance(30) ? "# a random grammar\n" : "";
    for (size_t r : order) {
      out += name(r) + (chance(50) ? " ::= " : "::=\n  ");
      render_gbnf(rules_[r], out);
      // An empty last alternative would let the rule go on past the line break after '|'.
      if (rules_[r].back().empty()) out += "\"\"";
      out += chance(20) ? "  # end\r\n" : "\n";
    }
    return out;
  }
  std::string pcre() {
    std::string out;
    render_pcre(rules_[0], out);
    return out;
  }
  std::u32string sample() {
    std::u32string out;
    sample(rules_[0], out);
    return out;
  }
  std::u32string mutated(std::u32string s) {
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
    return s;
  }
  std::u32string random_string() {
    std::u32string s;
    for (int n = pick(7); n > 0; --n) s += letter();
    return s;
  }

 private:
  static std::string name(size_t r) { return r == 0 ? "root" : "rule-" + std::to_string(r) + "x"; }
  static bool nullable(const Alts& alts) {
    for (const auto& alt : alts) {
      bool all = true;
      for (const Expr& e : alt) all = all && e.nullable;
      if (all) return true;
    }
    return false;
  }

  Alts alternatives(int depth) {
    Alts alts(static_cast<size_t>(chance(60) ? 1 : 2 + pick(2)));
    for (auto& alt : alts) {
      for (int n = chance(8) ? 0 : 1 + pick(3); n > 0; --n) alt.push_back(item(depth));
    }
    return alts;
  }
  Expr item(int depth) {
    Expr e;
    const int k = pick(100);
    bool nullable = false;
    if (k < 35 || (depth >= 2 && k >= 60)) {
      for (int n = chance(5) ? 0 : 1 + pick(2); n > 0; --n) e.text += letter();
      nullable = e.text.empty();
    } else if (k < 40) {
      e.kind = Expr::Kind::kDot;
    } else if (k < 60) {
      e.kind = Expr::Kind::kClass;
      e.negated = chance(30);
      for (int n = 1 + pick(3); n > 0; --n) {
        char32_t lo = letter(), hi = chance(40) ? letter() : lo;
        if (hi < lo) std::swap(lo, hi);
        e.ranges.emplace_back(lo, hi);
      }
    } else if (k < 70 && current_ + 1 < rules_.size() && depth == 0) {
      e.kind = Expr::Kind::kRef;
      e.rule =
          current_ + 1 + static_cast<size_t>(pick(static_cast<int>(rules_.size() - current_ - 1)));
      nullable = nullable_[e.rule];
    } else {
      e.kind = Expr::Kind::kGroup;
      e.alts = alternatives(depth + 1);
      nullable = GrammarGenerator::nullable(e.alts);
    }
    if (chance(35)) {
      // Unbounded repetitions only of items that cannot match "" (llama.cpp's rule too).
      switch (pick(6)) {
        case 0:
          e.min = 0, e.max = nullable ? 1 : -1;
          break;
        case 1:
          e.min = 1, e.max = nullable ? 2 : -1;
          break;
        case 2:
          e.min = 0, e.max = 1;
          break;
        case 3:
          e.min = e.max = pick(3);
          break;
        case 4:
          e.min = pick(3), e.max = nullable ? e.min + 1 : -1;
          break;
        default:
          e.min = pick(3), e.max = e.min + pick(3);
          break;
      }
    }
    e.nullable = nullable || e.min == 0;
    return e;
  }

  // A character in a GBNF literal or class, in one of its spellings.
  void gbnf_char(char32_t c, bool in_class, std::string& out) {
    const std::string special = in_class ? "\\]-^[" : "\\\"";
    if (c < 0x80 && special.find(static_cast<char>(c)) != std::string::npos) {
      if (c == '\\' || c == '"' || c == ']' || c == '[') {
        out += {'\\', static_cast<char>(c)};
        return;
      }
    }
    if (c == '\n' || c == '\t') {
      out += c == '\n' ? "\\n" : "\\t";
      return;
    }
    char hex[16];
    const bool must_escape = in_class && (c == '-' || c == '^');
    switch (must_escape ? pick(3) : pick(5)) {
      case 0:
        if (c < 0x100) {
          std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned>(c));
          out += hex;
          return;
        }
        [[fallthrough]];
      case 1:
        if (c < 0x10000) {
          std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
          out += hex;
          return;
        }
        [[fallthrough]];
      case 2:
        std::snprintf(hex, sizeof hex, "\\U%08X", static_cast<unsigned>(c));
        out += hex;
        return;
      default:
        out += utf8(static_cast<uint32_t>(c));
        return;
    }
  }
  void render_gbnf(const Alts& alts, std::string& out) {
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += chance(20) ? " |\n    " : " | ";
      for (const Expr& e : alts[i]) render_gbnf(e, out), out += ' ';
    }
  }
  void render_gbnf(const Expr& e, std::string& out) {
    switch (e.kind) {
      case Expr::Kind::kLit:
        out += '"';
        for (char32_t c : e.text) gbnf_char(c, false, out);
        out += '"';
        break;
      case Expr::Kind::kDot:
        out += '.';
        break;
      case Expr::Kind::kClass:
        out += e.negated ? "[^" : "[";
        for (auto [lo, hi] : e.ranges) {
          gbnf_char(lo, true, out);
          if (hi != lo) out += '-', gbnf_char(hi, true, out);
        }
        out += ']';
        break;
      case Expr::Kind::kRef:
        out += name(e.rule);
        break;
      case Expr::Kind::kGroup:
        out += chance(20) ? "(\n  " : "(";
        render_gbnf(e.alts, out);
        out += ')';
        break;
    }
    if (e.min == 1 && e.max == 1) return;
    if (e.min == 0 && e.max < 0) {
      out += '*';
    } else if (e.min == 1 && e.max < 0) {
      out += '+';
    } else if (e.min == 0 && e.max == 1 && chance(70)) {
      out += '?';
    } else if (e.max < 0) {
      out += "{" + std::to_string(e.min) + ",}";
    } else if (e.min == e.max) {
      out += "{" + std::to_string(e.min) + "}";
    } else {
      out += "{" + (e.min == 0 && chance(40) ? "" : std::to_string(e.min)) +
             (chance(20) ? " , " : ",") + std::to_string(e.max) + "}";
    }
  }
  static std::string pcre_char(char32_t c) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "\\x{%X}", static_cast<unsigned>(c));
    return hex;
  }
  void render_pcre(const Alts& alts, std::string& out) {
    out += "(?:";
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += '|';
      for (const Expr& e : alts[i]) render_pcre(e, out);
    }
    out += ')';
  }
  void render_pcre(const Expr& e, std::string& out) {
    const bool group =
        e.kind == Expr::Kind::kLit && (e.text.size() != 1 || e.min != 1 || e.max != 1);
    if (group) out += "(?:";
    switch (e.kind) {
      case Expr::Kind::kLit:
        for (char32_t c : e.text) out += pcre_char(c);
        break;
      case Expr::Kind::kDot:
        out += "(?s:.)";
        break;
      case Expr::Kind::kClass:
        out += e.negated ? "[^" : "[";
        for (auto [lo, hi] : e.ranges) out += pcre_char(lo) + "-" + pcre_char(hi);
        out += ']';
        break;
      case Expr::Kind::kRef:
        render_pcre(rules_[e.rule], out);
        break;
      case Expr::Kind::kGroup:
        render_pcre(e.alts, out);
        break;
    }
    if (group) out += ")";
    if (e.min != 1 || e.max != 1) {
      out += "{" + std::to_string(e.min) + "," + (e.max < 0 ? "" : std::to_string(e.max)) + "}";
    }
  }
  void sample(const Alts& alts, std::u32string& out) {
    for (const Expr& e : alts[static_cast<size_t>(pick(static_cast<int>(alts.size())))]) {
      const int n = e.max < 0 ? e.min + pick(3) : e.min + pick(e.max - e.min + 1);
      for (int i = 0; i < n; ++i) sample(e, out);
    }
  }
  void sample(const Expr& e, std::u32string& out) {
    switch (e.kind) {
      case Expr::Kind::kLit:
        out += e.text;
        break;
      case Expr::Kind::kDot:
        out += letter();
        break;
      case Expr::Kind::kClass: {
        if (e.negated || chance(10)) {
          out += letter();
          break;
        }
        const auto [lo, hi] =
            e.ranges[static_cast<size_t>(pick(static_cast<int>(e.ranges.size())))];
        char32_t c =
            lo + static_cast<char32_t>(std::uniform_int_distribution<uint32_t>(0, hi - lo)(rng_));
        if (chance(30)) c = hi;
        out += c >= 0xD800 && c < 0xE000 ? lo : c;
        break;
      }
      case Expr::Kind::kRef:
        sample(rules_[e.rule], out);
        break;
      case Expr::Kind::kGroup:
        sample(e.alts, out);
        break;
    }
  }

  std::mt19937 rng_;
  std::vector<char32_t> chars_;  // this grammar's favourite characters
  std::vector<Alts> rules_;
  std::vector<bool> nullable_;
  size_t current_ = 0;  // the rule being made
};

TEST(StructuredGbnf, MatchesPcre2OnRandomRegularGrammars) {
  const auto start = std::chrono::steady_clock::now();
  GrammarGenerator gen(20240612);
  int grammars = 0, refused = 0, strings = 0, full = 0, prefixes = 0, skipped = 0, failures = 0;
  for (int p = 0; p < 2000 && failures < 5; ++p) {
    gen.make();
    const std::string ours = gen.gbnf(), theirs = gen.pcre();
    SCOPED_TRACE("grammar:\n" + escaped(ours) + "\nPCRE2: " + escaped(theirs));
    const Pcre pcre(theirs);
    ASSERT_TRUE(pcre.ok()) << "PCRE2 refuses the pattern";
    std::shared_ptr<const Grammar> g;
    try {
      g = gbnf_grammar(ours);
    } catch (const Error& e) {
      // Ambiguity the matcher would pay for too dearly (nested repetitions of nullable items).
      ASSERT_NE(std::string(e.what()).find("can begin in too many ways"), std::string::npos)
          << e.what();
      ++refused;
      continue;
    }
    ++grammars;
    for (int i = 0; i < 24; ++i) {
      std::u32string s = i < 18 ? gen.sample() : gen.random_string();
      if (i >= 10 && i < 18) s = gen.mutated(std::move(s));
      ++strings;
      // Character by character: alive <=> PCRE2 finds a hard partial match (or a match).
      Matcher m(g);
      bool alive = true;
      for (size_t k = 1; k <= s.size() && alive; ++k) {
        alive = m.advance(utf8(static_cast<uint32_t>(s[k - 1])));
        const int rc = pcre.prefix(utf8_of(s.substr(0, k)));
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
          ++skipped;
          continue;
        }
        ASSERT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) << rc;
        ++prefixes;
        if (alive != (rc >= 0 || rc == PCRE2_ERROR_PARTIAL)) {
          ADD_FAILURE() << "prefix '" << escaped(utf8_of(s.substr(0, k))) << "': matcher "
                        << (alive ? "alive" : "dead") << ", PCRE2 rc " << rc;
          ++failures;
        }
      }
      const std::string bytes = utf8_of(s);
      const int rc = pcre.full(bytes);
      if (rc == PCRE2_ERROR_MATCHLIMIT) {
        ++skipped;
        continue;
      }
      ASSERT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH) << rc;
      full += rc >= 0;
      if ((alive && m.can_end()) != (rc >= 0)) {
        ADD_FAILURE() << "string '" << escaped(bytes) << "': matcher " << (alive && m.can_end())
                      << ", PCRE2 " << (rc >= 0);
        ++failures;
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "gbnf vs PCRE2: %d grammars (%d more refused as too ambiguous), %d strings (%d "
      "full matches), %d prefixes, %d skipped (PCRE2's match limit), %.2f s\n",
      grammars, refused, strings, full, prefixes, skipped, seconds);
  EXPECT_EQ(failures, 0);
  EXPECT_LT(refused, grammars / 50);
  EXPECT_GT(full, strings / 5);
  EXPECT_LT(skipped, strings / 100);
}

}  // namespace
}  // namespace kvattn::structured
