// Numeric ranges as grammars (src/engine/structured/numeric_range.h): for random bounds,
// every candidate text is accepted exactly when it is a JSON number written as the grammar
// promises (no leading zeros, no "-0", plain decimals) and its value lies in the range; and
// through json_schema_grammar, minimum / maximum / exclusiveMinimum / exclusiveMaximum in
// their draft 4 and 2019+ forms.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/structured/json_grammar.h"
#include "engine/structured/matcher.h"
#include "engine/structured/numeric_range.h"

namespace kvattn::structured {
namespace {

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.can_end();
}

std::shared_ptr<const Grammar> integers(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                        int digits = 16) {
  GrammarBuilder b;
  const auto s = integer_range(b, lo, hi, digits);
  if (!s) return nullptr;
  return b.build(*s);
}

std::shared_ptr<const Grammar> numbers(std::optional<Bound> lo, std::optional<Bound> hi,
                                       int digits = 16) {
  GrammarBuilder b;
  const auto s = number_range(b, lo, hi, digits);
  if (!s) return nullptr;
  return b.build(*s);
}

std::string describe(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  return "[" + (lo ? std::to_string(*lo) : "-inf") + ", " + (hi ? std::to_string(*hi) : "inf") +
         "]";
}

TEST(IntegerRange, EveryIntegerTextIsAcceptedExactlyInRange) {
  std::mt19937_64 rng(5);
  const std::vector<int64_t> edges = {0, 1, -1, 9, 10, 11, 99, 100, 101, -9, -10, -99, -100,
                                      999, 1000, -1000, 1234, -1234};
  for (int round = 0; round < 160; ++round) {
    std::optional<int64_t> lo, hi;
    const auto pick = [&]() -> int64_t {
      return rng() % 2 ? edges[rng() % edges.size()]
                       : static_cast<int64_t>(rng() % 4001) - 2000;
    };
    if (rng() % 5) lo = pick();
    if (rng() % 5) hi = pick();
    if (lo && hi && *lo > *hi) std::swap(*lo, *hi);
    const auto g = integers(lo, hi);
    ASSERT_NE(g, nullptr) << describe(lo, hi);
    for (int64_t x = -2100; x <= 2100; ++x) {
      const bool in = (!lo || x >= *lo) && (!hi || x <= *hi);
      ASSERT_EQ(accepts(g, std::to_string(x)), in) << describe(lo, hi) << " x = " << x;
    }
    for (const char* bad : {"-0", "00", "01", "+1", "1.0", "", "-", "1e2", " 1", "0x1"}) {
      EXPECT_FALSE(accepts(g, bad)) << describe(lo, hi) << " '" << bad << "'";
    }
  }
}

TEST(IntegerRange, WideAndEmptyRanges) {
  // Bounds near the digit cap; an unbounded side stops at 16 digits.
  const auto g = integers(-9'999'999'999'999'990, std::nullopt);
  EXPECT_TRUE(accepts(g, "9999999999999999"));
  EXPECT_FALSE(accepts(g, "10000000000000000"));
  EXPECT_TRUE(accepts(g, "-9999999999999990"));
  EXPECT_FALSE(accepts(g, "-9999999999999991"));
  const auto big = integers(123'456'789'012, 123'456'790'000);
  EXPECT_TRUE(accepts(big, "123456789012"));
  EXPECT_TRUE(accepts(big, "123456789999"));
  EXPECT_TRUE(accepts(big, "123456790000"));
  EXPECT_FALSE(accepts(big, "123456789011"));
  EXPECT_FALSE(accepts(big, "123456790001"));
  EXPECT_EQ(integers(5, 4), nullptr);
  EXPECT_EQ(integers(int64_t{1} << 60, std::nullopt), nullptr);  // past 16 digits
  const auto all = integers(std::nullopt, std::nullopt, 3);
  EXPECT_TRUE(accepts(all, "-999"));
  EXPECT_FALSE(accepts(all, "1000"));
}

// A random decimal text: optional sign, 1-3 integer digits (sometimes a leading zero),
// an optional fraction of 1-3 digits.
std::string random_decimal(std::mt19937_64& rng) {
  std::string s = rng() % 3 == 0 ? "-" : "";
  const int int_digits = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < int_digits; ++i) {
    s += static_cast<char>('0' + (i == 0 && rng() % 4 ? 1 + rng() % 9 : rng() % 10));
  }
  if (rng() % 2) {
    s += '.';
    const int frac = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < frac; ++i) s += static_cast<char>('0' + (rng() % 3 ? rng() % 10 : 0));
  }
  return s;
}

// What the grammar promises: JSON's number syntax without exponent, and no negative zero.
bool well_formed(const std::string& s) {
  const size_t body = s[0] == '-' ? 1 : 0;
  const size_t dot = s.find('.');
  const std::string int_part = s.substr(body, dot == std::string::npos ? std::string::npos
                                                                        : dot - body);
  if (int_part.size() > 1 && int_part[0] == '0') return false;
  if (body == 1 && std::stod(s) == 0) return false;  // "-0", "-0.00"
  return true;
}

TEST(NumberRange, EveryDecimalIsAcceptedExactlyInRange) {
  std::mt19937_64 rng(9);
  for (int round = 0; round < 300; ++round) {
    std::optional<Bound> lo, hi;
    if (rng() % 4) lo = Bound{static_cast<int64_t>(rng() % 41) - 20, rng() % 2 == 0};
    if (rng() % 4) hi = Bound{static_cast<int64_t>(rng() % 41) - 20, rng() % 2 == 0};
    if (lo && hi && lo->value > hi->value) std::swap(lo->value, hi->value);
    const auto in_range = [&](double x) {
      return (!lo || (lo->exclusive ? x > lo->value : x >= lo->value)) &&
             (!hi || (hi->exclusive ? x < hi->value : x <= hi->value));
    };
    const std::string what = (lo ? std::string(lo->exclusive ? "(" : "[") +
                                       std::to_string(lo->value) : "(-inf") + ", " +
                             (hi ? std::to_string(hi->value) + (hi->exclusive ? ")" : "]")
                                 : "inf)");
    const auto g = numbers(lo, hi);
    const bool empty = lo && hi && lo->value == hi->value && (lo->exclusive || hi->exclusive);
    if (empty) {
      EXPECT_EQ(g, nullptr) << what;
      continue;
    }
    ASSERT_NE(g, nullptr) << what;
    for (int i = 0; i < 600; ++i) {
      const std::string s = random_decimal(rng);
      const bool expect = well_formed(s) && in_range(std::stod(s));
      ASSERT_EQ(accepts(g, s), expect) << what << " '" << s << "'";
    }
    for (const char* bad : {"1e1", "1.", ".5", "+1", "", "-", "1.0.0"}) {
      EXPECT_FALSE(accepts(g, bad)) << what << " '" << bad << "'";
    }
  }
}

TEST(NumberRange, UnitIntervalAndItsEdges) {
  const auto open = numbers(Bound{0, true}, Bound{1, true});
  for (const char* in : {"0.5", "0.0001", "0.9999999999999999"}) EXPECT_TRUE(accepts(open, in));
  for (const char* out : {"0", "0.0", "1", "1.0", "-0.5", "-0.0"}) {
    EXPECT_FALSE(accepts(open, out)) << out;
  }
  const auto closed = numbers(Bound{0, false}, Bound{1, false});
  for (const char* in : {"0", "0.0", "1", "1.000", "0.25"}) EXPECT_TRUE(accepts(closed, in));
  for (const char* out : {"1.5", "1.0001", "-0", "2"}) EXPECT_FALSE(accepts(closed, out)) << out;
  const auto point = numbers(Bound{-3, false}, Bound{-3, false});
  EXPECT_TRUE(accepts(point, "-3"));
  EXPECT_TRUE(accepts(point, "-3.00"));
  EXPECT_FALSE(accepts(point, "-3.01"));
  EXPECT_EQ(numbers(Bound{2, true}, Bound{2, false}), nullptr);
}

bool schema_accepts(const char* schema, const std::string& text) {
  return accepts(json_schema_grammar(schema), text);
}

TEST(JsonSchemaRanges, KeywordsInBothDrafts) {
  const char* dice = R"({"type": "integer", "minimum": 1, "maximum": 6})";
  for (int x = -2; x <= 9; ++x) EXPECT_EQ(schema_accepts(dice, std::to_string(x)), x >= 1 && x <= 6);
  // 2019+: exclusive bounds are numbers; fractional bounds round inward for integers.
  const char* open = R"({"type": "integer", "exclusiveMinimum": -2.5, "exclusiveMaximum": 3})";
  EXPECT_TRUE(schema_accepts(open, "-2"));
  EXPECT_FALSE(schema_accepts(open, "-3"));
  EXPECT_TRUE(schema_accepts(open, "2"));
  EXPECT_FALSE(schema_accepts(open, "3"));
  // Draft 4: a boolean makes the bound beside it exclusive.
  const char* draft4 = R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true,
      "maximum": 10, "exclusiveMaximum": false})";
  EXPECT_FALSE(schema_accepts(draft4, "0"));
  EXPECT_TRUE(schema_accepts(draft4, "1"));
  EXPECT_TRUE(schema_accepts(draft4, "10"));
  // Both forms of one side: the tighter wins.
  const char* both = R"({"type": "number", "minimum": 2, "exclusiveMinimum": 2})";
  EXPECT_FALSE(schema_accepts(both, "2"));
  EXPECT_TRUE(schema_accepts(both, "2.5"));
  const char* prob = R"({"type": "number", "minimum": 0, "maximum": 1})";
  EXPECT_TRUE(schema_accepts(prob, "0.75"));
  EXPECT_FALSE(schema_accepts(prob, "1.25"));
  EXPECT_FALSE(schema_accepts(prob, "7.5e-1"));  // bounded numbers are plain decimals
  // Bounds without a type mean a number.
  EXPECT_TRUE(schema_accepts(R"({"maximum": 3})", "2.5"));
  EXPECT_FALSE(schema_accepts(R"({"maximum": 3})", "4"));
  EXPECT_FALSE(schema_accepts(R"({"maximum": 3})", "\"text\""));
  // Unbounded numbers keep exponents.
  EXPECT_TRUE(schema_accepts(R"({"type": "number"})", "7.5e-1"));
}

}  // namespace
}  // namespace kvattn::structured
