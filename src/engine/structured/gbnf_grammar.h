// Internal: a GBNF grammar (llama.cpp's grammars/README.md; llama.cpp's --grammar and server
// `grammar` field, vLLM's guided_grammar with xgrammar) as a grammar; the start rule is `root`.
//
// The syntax is llama.cpp's (src/llama-grammar.cpp):
//   rules `name ::= alternatives`, names [a-zA-Z0-9-]+, used before or after their
//   definition, recursion allowed (left recursion is refused by GrammarBuilder::build);
//   a rule ends at a newline, except inside ( ) and after `|` or `::=`; # comments;
//   "literals" and [classes] ([^...] negated, a-z ranges) with the escapes \n \r \t \\ \" \[
//   \] \xHH \uHHHH \UHHHHHHHH, each a code point (so \xff is U+00FF, bytes C3 BF); `.` any
//   character, line breaks included; ( ) groups; | with empty alternatives; * + ? {m} {m,}
//   {m,n} and {,n} (an extension), applying to the item before (a whole literal) and
//   stackable ("a"{2}{3} is six a's).
// Characters are Unicode scalar values: a class, negated class or `.` matches the UTF-8
// encoding of one allowed scalar, never an invalid byte sequence.
// Choices where llama.cpp is silent or lax: a later definition of a name replaces the earlier
// one, as in llama.cpp; a reversed range [z-a], an empty class [] and a class matching no
// character are errors (llama.cpp matches nothing or "" there); a surrogate or a value past
// U+10FFFF in an escape is an error.
//
// Errors throw kvattn::Error "gbnf: line L, column C: <problem>" (columns count characters):
// undefined rule, missing root, unterminated literal, class or group, bad escape, invalid
// UTF-8, bad repetition bounds, trailing text after a rule, groups nested deeper than
// kMaxGbnfDepth, more than kMaxGbnfRules rule names, an unbounded repetition (* + {m,}) of an
// item that visibly matches "" (llama.cpp refuses it as left recursion; through a rule
// reference, GrammarBuilder::build refuses it so), and repetitions that would expand past
// GrammarBuilder::kMaxElements, counted as regex_grammar.h counts them (nested repetitions
// multiply; a rule reference counts as one element).
// A matcher's work per byte grows with how deep rules nest before a character and with how
// many paths lead into one, which ambiguity multiplies (r2 ::= r1 | r1 "x", r3 ::= r2 | r2
// "x", ... doubles them per rule, and so does ("a"?){n} per copy; llama.cpp walks them all
// too): grammars past kMaxGbnfNesting or kMaxGbnfStarts throw, naming the rule.
// (kMaxGbnfRules bounds GrammarBuilder::build's nullable fixpoint, whose passes can grow with
// the number of rules.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

inline constexpr int kMaxGbnfDepth = 256;
inline constexpr size_t kMaxGbnfRules = 4096;
inline constexpr int64_t kMaxGbnfNesting = 1024;  // frames, helper rules included
inline constexpr int64_t kMaxGbnfStarts = int64_t{1} << 18;

// A GBNF grammar (llama.cpp's grammars/README.md); the start rule is `root`.
std::shared_ptr<const Grammar> gbnf_grammar(std::string_view text);

}  // namespace kvattn::structured
