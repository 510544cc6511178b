// Internal: sets of Unicode code points, and their UTF-8 encodings as grammar symbols. The
// regex and GBNF front ends read characters (code points); the grammar matches bytes, so a
// character set becomes the byte sequences that encode its members, never an invalid,
// overlong or surrogate sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

// Sorted, disjoint, non-adjacent inclusive ranges of code points.
using CodePoints = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// The Unicode scalar values: every code point but the surrogates.
inline const CodePoints kScalars = {{0, 0xD7FF}, {0xE000, kMaxCodePoint}};

CodePoints normalized(CodePoints s);  // sorted and merged, from ranges in any order
CodePoints intersect(const CodePoints& a, const CodePoints& b);
CodePoints negated(const CodePoints& s);  // the scalar values not in `s`

inline bool is_scalar(uint32_t cp) { return cp <= kMaxCodePoint && (cp < 0xD800 || cp >= 0xE000); }
std::string utf8(uint32_t cp);

// The character whose UTF-8 encoding starts at text[at]: its code point and byte length, the
// length 0 when the bytes there are not one valid scalar value (truncated, overlong, a
// surrogate, past U+10FFFF, a stray continuation byte).
struct Utf8Char {
  uint32_t cp = 0;
  size_t length = 0;
};
Utf8Char decode_utf8(std::string_view text, size_t at);

// Makes one character out of a code point set into a symbol of `b`: per encoded length, the
// lead bytes whose whole block of code points is in the set share one byte set; the others
// recurse into their continuation bytes (the standard split of a code point range into
// byte-range sequences). Each distinct set is built once.
class Utf8Sets {
 public:
  explicit Utf8Sets(GrammarBuilder& b) : b_(b) {}
  // nullopt when the set is empty.
  std::optional<GrammarBuilder::Symbol> symbol(const CodePoints& set);

 private:
  void bytes(uint32_t first, uint8_t lo, uint8_t hi, uint32_t block, int tail,
             std::vector<GrammarBuilder::Symbol>& alts);

  GrammarBuilder& b_;
  std::map<CodePoints, GrammarBuilder::Symbol> built_;
  CodePoints cps_;  // the set being encoded, within one encoded length
};

}  // namespace kvattn::structured
