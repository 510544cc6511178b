// Internal: a context-free grammar over bytes, the form every structured-output request
// (JSON object, JSON schema, choice, regex) compiles to before decoding is constrained by it.
//
// A grammar is a set of rules; a rule is a list of alternatives; an alternative is a sequence
// of symbols, each one byte out of a set (ByteSet) or a reference to a rule. GrammarBuilder
// makes the usual operators (sequence, alternation, optional, repetition) out of helper rules.
// Grammars are immutable once built and shared between requests.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvattn::structured {

using ByteSet = std::bitset<256>;

// The compiled form: every alternative of every rule laid out in one array of elements, each
// alternative closed by kEnd. Matcher walks it (matcher.h).
class Grammar {
 public:
  static constexpr int32_t kEnd = -1;
  // elements()[p]: >= 0 a byte set's index in byte_sets(); kEnd; <= -2 the rule -2 - e.
  static constexpr bool is_ref(int32_t e) { return e <= -2; }
  static constexpr int32_t ref_rule(int32_t e) { return -2 - e; }

  const std::vector<int32_t>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // The first element of each alternative of `rule`.
  const std::vector<uint32_t>& alternatives(int32_t rule) const {
    return alternatives_[static_cast<size_t>(rule)];
  }
  int32_t root() const { return root_; }
  size_t num_rules() const { return alternatives_.size(); }
  // The rule whose alternatives hold element position `pos`.
  int32_t rule_of(uint32_t pos) const { return rule_of_[pos]; }

  // A rule of a bounded or counted repetition's chain (GrammarBuilder::repeat): `required`
  // more copies of the body must come, at most `total` may (kUnbounded: no limit), the body
  // never matching the empty string. Rules of one chain with the same (required, total)
  // capped at any h match the same texts of fewer than h copies: token_constraint.h shares
  // their token masks. id < 0: not a chain rule.
  struct Chain {
    int32_t id = -1;
    int64_t required = 0;
    int64_t total = 0;
  };
  static constexpr int64_t kUnbounded = int64_t{1} << 40;
  const Chain& chain(int32_t rule) const { return chains_[static_cast<size_t>(rule)]; }
  // The grammar in a GBNF-like text, one rule a line (tests and error messages).
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  std::vector<int32_t> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<uint32_t>> alternatives_;
  std::vector<std::string> names_;
  std::vector<int32_t> rule_of_;
  std::vector<Chain> chains_;
  int32_t root_ = 0;
};

// Builds a Grammar. Symbols are cheap handles; the operators add helper rules as they go.
// Recursion goes through declare() / define(). build() checks the result: every rule defined,
// no left recursion (a rule that can reach itself before consuming a byte), at most
// kMaxElements elements; it throws kvattn::Error naming what is wrong.
class GrammarBuilder {
 public:
  struct Symbol {
    int32_t element;  // as Grammar::elements(): a byte set index or a reference
  };
  static constexpr size_t kMaxElements = size_t{1} << 20;

  Symbol bytes(const ByteSet& set);  // one byte of `set` (not empty)
  Symbol byte(uint8_t b);
  Symbol byte_range(uint8_t lo, uint8_t hi);  // lo..hi inclusive
  Symbol literal(std::string_view text);      // these bytes in order ("" matches nothing)
  Symbol sequence(const std::vector<Symbol>& parts);
  Symbol choice(const std::vector<Symbol>& alternatives);  // one of them (not empty)
  Symbol optional(Symbol s);
  Symbol star(Symbol s);  // zero or more
  Symbol plus(Symbol s);  // one or more
  // min..max copies; max < 0: unbounded. Bounded repetitions cost max rules.
  Symbol repeat(Symbol s, int64_t min, int64_t max);
  Symbol empty();  // matches the empty string
  // Another grammar's language as a symbol here, every byte set intersected with `allowed`
  // (a set left empty matches nothing): e.g. a regex inside a JSON string, without quotes.
  Symbol include(const Grammar& other, const ByteSet& allowed);

  // A rule to be defined later (recursive grammars, JSON schema's $ref).
  int32_t declare(std::string name);
  Symbol ref(int32_t rule) const { return Symbol{-2 - rule}; }
  void define(int32_t rule, Symbol body);

  std::shared_ptr<const Grammar> build(Symbol root);

 private:
  int32_t add_rule(std::string name, std::vector<std::vector<int32_t>> alternatives);
  int32_t set_index(const ByteSet& set);  // byte_sets_'s entry for `set`, added if new
  void count(size_t elements);

  std::vector<ByteSet> byte_sets_;
  std::unordered_map<ByteSet, int32_t> set_index_;
  std::vector<std::vector<std::vector<int32_t>>> rules_;
  std::vector<std::string> names_;
  std::vector<Grammar::Chain> chains_;  // per rule; the body's symbol in chain_bodies_
  std::vector<int32_t> chain_bodies_;
  int32_t next_chain_ = 0;
  std::vector<bool> defined_;
  size_t elements_ = 0;
};

}  // namespace kvattn::structured
