// Internal: grammars for JSON numbers between bounds (JSON Schema's minimum, maximum,
// exclusiveMinimum, exclusiveMaximum), as decimal texts.
//
// Integers: every integer in the range, written as JSON writes it (no leading zeros, no "-0",
// no sign on 0). Numbers: an integer part and an optional fraction (no exponent: a bounded
// number is written in plain decimals), every such text whose value lies in the range; "-0"
// and "-0.0" are left out (they equal 0, which "0" writes). Bounds of numbers must be
// integers (e.g. 0..1 or -90..90); the schema front end refuses others by name.
//
// Digits are at most `max_digits` in the integer part and in the fraction (an unbounded side
// ends there), as JSON's other numbers in json_grammar.h. Bounds beyond that many digits
// act as the nearest representable ones.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

struct Bound {
  int64_t value = 0;
  bool exclusive = false;
};

// The integers in [lo, hi] (either side nullopt: unbounded); nullopt when the range holds
// none of at most max_digits digits. max_digits in [1, 18].
std::optional<GrammarBuilder::Symbol> integer_range(GrammarBuilder& b, std::optional<int64_t> lo,
                                                    std::optional<int64_t> hi, int max_digits);

// The decimal numbers between lo and hi (each inclusive or exclusive; nullopt: unbounded);
// nullopt when there is none. A fraction has at most max_digits digits, except that one which
// must be non-zero (just above an exclusive bound) may have up to max_digits - 1 zeros first.
std::optional<GrammarBuilder::Symbol> number_range(GrammarBuilder& b, std::optional<Bound> lo,
                                                   std::optional<Bound> hi, int max_digits);

}  // namespace kvattn::structured
