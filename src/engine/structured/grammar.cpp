#include "engine/structured/grammar.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "kvattn/core/error.h"

namespace kvattn::structured {
namespace {

// A byte set as a GBNF class: [a-z\x22].
std::string set_text(const ByteSet& set) {
  const auto one = [](int b) {
    if (b >= 0x21 && b < 0x7f && b != '\\' && b != ']' && b != '-' && b != '^')
      return std::string(1, static_cast<char>(b));
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", b);
    return std::string(hex);
  };
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set[static_cast<size_t>(b)]) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set[static_cast<size_t>(e + 1)]) ++e;
    out += one(b);
    if (e > b) {  // (two appends: GCC 12 warns falsely on "-" + a temporary string)
      out += '-';
      out += one(e);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < alternatives_.size(); ++r) {
    out += names_[r] + " ::=";
    for (size_t a = 0; a < alternatives_[r].size(); ++a) {
      if (a > 0) out += " |";
      for (size_t p = alternatives_[r][a]; elements_[p] != kEnd; ++p) {
        const int32_t e = elements_[p];
        out += " " + (is_ref(e) ? names_[static_cast<size_t>(ref_rule(e))]
                                : set_text(byte_sets_[static_cast<size_t>(e)]));
      }
    }
    out += "\n";
  }
  return out;
}

void GrammarBuilder::count(size_t elements) {
  elements_ += elements;
  KVATTN_CHECK(elements_ <= kMaxElements, "grammar: more than ", kMaxElements,
               " elements (the schema, pattern or lengths ask for too large a grammar)");
}

int32_t GrammarBuilder::add_rule(std::string name, std::vector<std::vector<int32_t>> alts) {
  size_t n = alts.size();
  for (const auto& a : alts) n += a.size();
  count(n);
  rules_.push_back(std::move(alts));
  names_.push_back(std::move(name));
  defined_.push_back(true);
  chains_.emplace_back();
  chain_bodies_.push_back(0);
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t GrammarBuilder::set_index(const ByteSet& set) {
  const auto [it, fresh] = set_index_.try_emplace(set, static_cast<int32_t>(byte_sets_.size()));
  if (fresh) byte_sets_.push_back(set);
  return it->second;
}

GrammarBuilder::Symbol GrammarBuilder::bytes(const ByteSet& set) {
  KVATTN_CHECK(set.any(), "grammar: an empty byte set matches nothing");
  return Symbol{set_index(set)};
}

GrammarBuilder::Symbol GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

GrammarBuilder::Symbol GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  KVATTN_CHECK(lo <= hi, "grammar: byte range ", int{lo}, "-", int{hi}, " is empty");
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return bytes(s);
}

GrammarBuilder::Symbol GrammarBuilder::literal(std::string_view text) {
  if (text.empty()) return empty();
  if (text.size() == 1) return byte(static_cast<uint8_t>(text[0]));
  std::vector<int32_t> alt;
  alt.reserve(text.size());
  for (char c : text) alt.push_back(byte(static_cast<uint8_t>(c)).element);
  return ref(add_rule("lit", {std::move(alt)}));
}

GrammarBuilder::Symbol GrammarBuilder::sequence(const std::vector<Symbol>& parts) {
  if (parts.size() == 1) return parts[0];
  std::vector<int32_t> alt;
  alt.reserve(parts.size());
  for (Symbol p : parts) alt.push_back(p.element);
  return ref(add_rule("seq", {std::move(alt)}));
}

GrammarBuilder::Symbol GrammarBuilder::choice(const std::vector<Symbol>& alternatives) {
  KVATTN_CHECK(!alternatives.empty(), "grammar: a choice of no alternatives matches nothing");
  if (alternatives.size() == 1) return alternatives[0];
  std::vector<std::vector<int32_t>> alts;
  alts.reserve(alternatives.size());
  for (Symbol a : alternatives) alts.push_back({a.element});
  return ref(add_rule("alt", std::move(alts)));
}

GrammarBuilder::Symbol GrammarBuilder::empty() { return ref(add_rule("empty", {{}})); }

GrammarBuilder::Symbol GrammarBuilder::optional(Symbol s) {
  return ref(add_rule("opt", {{}, {s.element}}));
}

GrammarBuilder::Symbol GrammarBuilder::star(Symbol s) {
  const int32_t r = declare("star");
  rules_[static_cast<size_t>(r)] = {{}, {s.element, ref(r).element}};
  defined_[static_cast<size_t>(r)] = true;
  count(5);
  return ref(r);
}

GrammarBuilder::Symbol GrammarBuilder::plus(Symbol s) { return sequence({s, star(s)}); }

GrammarBuilder::Symbol GrammarBuilder::repeat(Symbol s, int64_t min, int64_t max) {
  KVATTN_CHECK(min >= 0 && (max < 0 || max >= min), "grammar: repetition {", min, ",", max,
               "} is empty");
  KVATTN_CHECK(
      min <= static_cast<int64_t>(kMaxElements) && max <= static_cast<int64_t>(kMaxElements),
      "grammar: repetition {", min, ",", max, "} is too large");
  if (max == 0) return empty();
  // A chain of rules, innermost first, each one copy of s and the rest of the chain:
  //   opt_j ::= "" | s opt_{j-1}   (j = max - min down to 1: the optional copies)
  //   req_m ::= s req_{m-1}        (m = min down to 1: the required ones)
  // (with star(s) in place of the optional copies when max is unbounded). Each rule records
  // how many copies it still needs and allows (Grammar::Chain).
  const int32_t id = next_chain_++;
  const auto mark = [&](Symbol rule, int64_t required, int64_t total) {
    const auto r = static_cast<size_t>(Grammar::ref_rule(rule.element));
    chains_[r] = Grammar::Chain{id, required, total};
    chain_bodies_[r] = s.element;
  };
  std::optional<Symbol> tail;
  int64_t total = 0;
  if (max < 0) {
    tail = star(s);
    total = Grammar::kUnbounded;
    mark(*tail, 0, total);
  } else {
    for (int64_t j = 1; j <= max - min; ++j) {
      tail = ref(
          add_rule("rep", tail ? std::vector<std::vector<int32_t>>{{}, {s.element, tail->element}}
                               : std::vector<std::vector<int32_t>>{{}, {s.element}}));
      mark(*tail, 0, ++total);
    }
  }
  for (int64_t m = 1; m <= min; ++m) {
    tail = ref(add_rule("req", tail ? std::vector<std::vector<int32_t>>{{s.element, tail->element}}
                                    : std::vector<std::vector<int32_t>>{{s.element}}));
    if (total < Grammar::kUnbounded) ++total;
    mark(*tail, m, total);
  }
  return *tail;
}

GrammarBuilder::Symbol GrammarBuilder::include(const Grammar& other, const ByteSet& allowed) {
  const auto first = static_cast<int32_t>(rules_.size());
  std::vector<int32_t> sets(other.byte_sets().size());
  for (size_t i = 0; i < sets.size(); ++i) sets[i] = set_index(other.byte_sets()[i] & allowed);
  for (size_t r = 0; r < other.num_rules(); ++r) {
    std::vector<std::vector<int32_t>> alts;
    for (uint32_t a : other.alternatives(static_cast<int32_t>(r))) {
      auto& alt = alts.emplace_back();
      for (size_t p = a; other.elements()[p] != Grammar::kEnd; ++p) {
        const int32_t e = other.elements()[p];
        alt.push_back(Grammar::is_ref(e) ? ref(first + Grammar::ref_rule(e)).element
                                         : sets[static_cast<size_t>(e)]);
      }
    }
    add_rule("inc", std::move(alts));
  }
  return ref(first + other.root());
}

int32_t GrammarBuilder::declare(std::string name) {
  rules_.emplace_back();
  names_.push_back(std::move(name));
  defined_.push_back(false);
  chains_.emplace_back();
  chain_bodies_.push_back(0);
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, Symbol body) {
  KVATTN_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size() &&
                   !defined_[static_cast<size_t>(rule)],
               "grammar: rule ", rule, " is not a declared, undefined rule");
  rules_[static_cast<size_t>(rule)] = {{body.element}};
  defined_[static_cast<size_t>(rule)] = true;
  count(2);
}

std::shared_ptr<const Grammar> GrammarBuilder::build(Symbol root) {
  const int32_t top = add_rule("root", {{root.element}});
  const size_t n = rules_.size();
  for (size_t r = 0; r < n; ++r) {
    KVATTN_CHECK(defined_[r], "grammar: rule '", names_[r], "' is used but never defined");
  }
  // Nullable rules (can match the empty string), by fixpoint.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : rules_[r]) {
        bool all = true;
        for (int32_t e : alt) {
          if (!Grammar::is_ref(e) || !nullable[static_cast<size_t>(Grammar::ref_rule(e))]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left edges: r -> s when s can start r before any byte. A cycle would make the matcher
  // expand forever.
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : rules_[r]) {
      for (int32_t e : alt) {
        if (!Grammar::is_ref(e)) break;
        left[r].push_back(Grammar::ref_rule(e));
        if (!nullable[static_cast<size_t>(Grammar::ref_rule(e))]) break;
      }
    }
  }
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (state[start] != 0) continue;
    path.emplace_back(static_cast<int32_t>(start), 0);
    state[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      const auto& edges = left[static_cast<size_t>(r)];
      if (next == edges.size()) {
        state[static_cast<size_t>(r)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t s = edges[next++];
      KVATTN_CHECK(state[static_cast<size_t>(s)] != 1, "grammar: rule '",
                   names_[static_cast<size_t>(s)],
                   "' is left-recursive (it can reach itself before matching a byte)");
      if (state[static_cast<size_t>(s)] == 0) {
        state[static_cast<size_t>(s)] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
  auto g = std::make_shared<Grammar>();
  g->chains_ = chains_;
  for (size_t r = 0; r < n; ++r) {
    const int32_t body = chain_bodies_[r];
    if (g->chains_[r].id >= 0 && Grammar::is_ref(body) &&
        nullable[static_cast<size_t>(Grammar::ref_rule(body))]) {
      g->chains_[r] = Grammar::Chain{};  // copies of nothing: no count of them holds
    }
  }
  g->byte_sets_ = byte_sets_;
  g->names_.resize(n);
  g->alternatives_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    g->names_[r] = names_[r] + std::to_string(r);
    for (const auto& alt : rules_[r]) {
      g->alternatives_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
      g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
      g->elements_.push_back(Grammar::kEnd);
      g->rule_of_.resize(g->elements_.size(), static_cast<int32_t>(r));
    }
  }
  g->root_ = top;
  return g;
}

}  // namespace kvattn::structured
