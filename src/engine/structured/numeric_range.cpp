#include "engine/structured/numeric_range.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

using Symbol = GrammarBuilder::Symbol;

int64_t power_of_ten(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

int num_digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

Symbol digits(GrammarBuilder& b, size_t n) {
  return n == 0 ? b.empty() : b.repeat(b.byte_range('0', '9'), static_cast<int64_t>(n),
                                       static_cast<int64_t>(n));
}

bool all_of(std::string_view s, char c) {
  return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

// Digit strings s of a's length with a <= s <= z (equal lengths: the order is the numeric one).
Symbol same_length(GrammarBuilder& b, std::string_view a, std::string_view z) {
  if (a.empty()) return b.empty();
  if (a == z) return b.literal(a);
  const auto lo = static_cast<uint8_t>(a[0]), hi = static_cast<uint8_t>(z[0]);
  const size_t rest = a.size() - 1;
  if (all_of(a.substr(1), '0') && all_of(z.substr(1), '9')) {
    return b.sequence({b.byte_range(lo, hi), digits(b, rest)});
  }
  if (lo == hi) return b.sequence({b.byte(lo), same_length(b, a.substr(1), z.substr(1))});
  const std::string nines(rest, '9'), zeros(rest, '0');
  std::vector<Symbol> alts = {b.sequence({b.byte(lo), same_length(b, a.substr(1), nines)})};
  if (hi - lo >= 2) {
    alts.push_back(b.sequence({b.byte_range(static_cast<uint8_t>(lo + 1),
                                            static_cast<uint8_t>(hi - 1)),
                               digits(b, rest)}));
  }
  alts.push_back(b.sequence({b.byte(hi), same_length(b, zeros, z.substr(1))}));
  return b.choice(alts);
}

// The integers in [lo, hi], 0 <= lo <= hi, without leading zeros.
Symbol non_negative_range(GrammarBuilder& b, int64_t lo, int64_t hi) {
  std::vector<Symbol> alts;
  for (int len = num_digits(lo); len <= num_digits(hi); ++len) {
    const int64_t first = len == 1 ? 0 : power_of_ten(len - 1);
    const int64_t last = power_of_ten(len) - 1;
    alts.push_back(
        same_length(b, std::to_string(std::max(lo, first)), std::to_string(std::min(hi, last))));
  }
  return b.choice(alts);
}

// Magnitudes m >= 0 written "I" or "I.F" with lower <= m (or < m) and m <= upper (or < upper),
// I at most `cap`. nullopt when there is none.
std::optional<Symbol> magnitudes(GrammarBuilder& b, Bound lower, std::optional<Bound> upper,
                                 int64_t cap, int max_digits) {
  const Symbol digit = b.byte_range('0', '9');
  const Symbol any_fraction = b.optional(b.sequence({b.byte('.'), b.repeat(digit, 1, max_digits)}));
  const Symbol zero_fraction =
      b.optional(b.sequence({b.byte('.'), b.repeat(b.byte('0'), 1, max_digits)}));
  // Zeros, then a non-zero digit: the fraction of an "I.F" above I.
  const Symbol non_zero_fraction =
      b.sequence({b.byte('.'), b.repeat(b.byte('0'), 0, max_digits - 1), b.byte_range('1', '9'),
                  b.repeat(digit, 0, max_digits - 1)});
  std::vector<Symbol> alts;
  // Integer parts whose every fraction fits: from lower (past it when exclusive) to upper - 1.
  const int64_t first = lower.exclusive ? lower.value + 1 : lower.value;
  const int64_t last = upper ? std::min(upper->value - 1, cap) : cap;
  if (first <= last) alts.push_back(b.sequence({non_negative_range(b, first, last), any_fraction}));
  // An exclusive lower bound itself, with a fraction above it (below any integer upper bound).
  if (lower.exclusive && lower.value <= cap && (!upper || upper->value > lower.value)) {
    alts.push_back(b.sequence({b.literal(std::to_string(lower.value)), non_zero_fraction}));
  }
  // An inclusive upper bound itself, with a zero fraction at most.
  if (upper && !upper->exclusive && upper->value <= cap &&
      (upper->value > lower.value || (upper->value == lower.value && !lower.exclusive))) {
    alts.push_back(b.sequence({b.literal(std::to_string(upper->value)), zero_fraction}));
  }
  if (alts.empty()) return std::nullopt;
  return b.choice(alts);
}

// Bounds past the digit cap: a lower one below -(cap + 1) is no bound; one above cap excludes
// everything (the clamped value keeps that).
std::optional<Bound> clamp_lower(std::optional<Bound> lo, int64_t cap) {
  if (lo && lo->value < -cap - 1) return std::nullopt;
  if (lo && lo->value > cap + 1) lo->value = cap + 1;
  return lo;
}
std::optional<Bound> clamp_upper(std::optional<Bound> hi, int64_t cap) {
  if (hi && hi->value > cap + 1) return std::nullopt;
  if (hi && hi->value < -cap - 1) hi->value = -cap - 1;
  return hi;
}

}  // namespace

std::optional<Symbol> integer_range(GrammarBuilder& b, std::optional<int64_t> lo,
                                    std::optional<int64_t> hi, int max_digits) {
  KVATTN_CHECK(max_digits >= 1 && max_digits <= 18, "integer_range: max_digits must be in "
               "[1, 18] but is ", max_digits);
  const int64_t cap = power_of_ten(max_digits) - 1;
  const int64_t first = lo ? std::max(*lo, -cap) : -cap;
  const int64_t last = hi ? std::min(*hi, cap) : cap;
  if (first > last) return std::nullopt;
  std::vector<Symbol> alts;
  if (first < 0) {  // "-" and the magnitudes in [max(1, -last), -first]
    alts.push_back(b.sequence(
        {b.byte('-'), non_negative_range(b, std::max<int64_t>(1, -last), -first)}));
  }
  if (last >= 0) alts.push_back(non_negative_range(b, std::max<int64_t>(0, first), last));
  return b.choice(alts);
}

std::optional<Symbol> number_range(GrammarBuilder& b, std::optional<Bound> lo,
                                   std::optional<Bound> hi, int max_digits) {
  KVATTN_CHECK(max_digits >= 1 && max_digits <= 18, "number_range: max_digits must be in "
               "[1, 18] but is ", max_digits);
  const int64_t cap = power_of_ten(max_digits) - 1;
  lo = clamp_lower(lo, cap);
  hi = clamp_upper(hi, cap);
  std::vector<Symbol> alts;
  // x >= 0: magnitudes from max(lo, 0) up to hi.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const Bound lower = lo && lo->value >= 0 ? *lo : Bound{0, false};
    if (auto m = magnitudes(b, lower, hi, cap, max_digits)) alts.push_back(*m);
  }
  // x < 0: "-" and magnitudes above 0 (or -hi), up to -lo.
  if (!lo || lo->value < 0) {
    const Bound lower = hi && hi->value < 0 ? Bound{-hi->value, hi->exclusive} : Bound{0, true};
    std::optional<Bound> upper;
    if (lo) upper = Bound{-lo->value, lo->exclusive};
    if (auto m = magnitudes(b, lower, upper, cap, max_digits)) {
      alts.push_back(b.sequence({b.byte('-'), *m}));
    }
  }
  if (alts.empty()) return std::nullopt;
  return b.choice(alts);
}

}  // namespace kvattn::structured
