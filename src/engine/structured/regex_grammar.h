// Internal: a regular expression as a grammar symbol (vLLM's guided_regex, JSON Schema's
// `pattern`), so that decoding can be constrained to the strings it matches.
//
// The language is the full match: a leading ^ and a trailing $ (of the pattern or of a
// top-level alternative; also \A, \z, \Z) are accepted and change nothing. The syntax is the
// common subset of Python re, ECMAScript and PCRE2 that schemas use:
//   literals (UTF-8; a character is its whole byte sequence), escaped punctuation,
//   \n \t \r \f \v \0 \xHH \x{H..} \uHHHH \u{H..} (a \uD8xx\uDCxx pair is one character),
//   \d \D \w \W \s \S (ASCII meanings), `.` (any character but \n),
//   [...] classes with ranges, ^ negation, escapes and non-ASCII members,
//   ( ) (?: ) (?P<n> ) (?<n> ) (?'n' ) as plain groups, | with empty alternatives,
//   * + ? {m} {m,} {m,n} {,n} and their lazy (?) and possessive (+) forms, read as greedy.
// Characters are Unicode scalar values (U+0000..U+10FFFF, no surrogates); negated classes and
// `.` match any such character not excluded, never an invalid or overlong sequence.
// A `{` not followed by a digit or ',' is a literal, as in all three engines (a malformed
// repetition such as a{2,x} throws); a `-` next to a class escape ([\w-.]) is a literal, as in
// ECMAScript; a `]` first in a class is a member, as in PCRE2 and Python ([]a] is ']' or 'a').
//
// Everything else throws kvattn::Error naming the pattern, the construct and its offset:
// backreferences, lookaround, \b, anchors elsewhere, inline flags, atomic groups, \p{..},
// POSIX classes; so do malformed patterns, groups nested deeper than kMaxRegexDepth, patterns
// matching no string, and repetitions that would expand past GrammarBuilder::kMaxElements
// (counted as if every repetition copied its body: nested counted repetitions multiply).
// Known limit: a pattern whose parses overlap heavily (.{0,1000}.{0,1000}x) can need more than
// Matcher::kMaxStacks stacks, past which the matcher drops some and may reject a match.
#pragma once

#include <memory>
#include <string_view>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

inline constexpr int kMaxRegexDepth = 256;

// The strings `pattern` matches as a whole, as a symbol of `b` (nullable when "" matches).
GrammarBuilder::Symbol regex_symbol(GrammarBuilder& b, std::string_view pattern);

// The same as a grammar of its own.
std::shared_ptr<const Grammar> regex_grammar(std::string_view pattern);

}  // namespace kvattn::structured
