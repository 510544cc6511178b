#include "engine/structured/matcher.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace kvattn::structured {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  elements_ = grammar_->elements().data();
  for (uint32_t a : grammar_->alternatives(grammar_->root())) expand(-1, a, current_);
  dedupe(current_);
}

int32_t Matcher::node(uint32_t pos, int32_t parent) {
  nodes_.push_back(Node{pos, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

void Matcher::expand(int32_t parent, uint32_t pos, State& out) {
  work_.clear();
  work_.emplace_back(parent, pos);
  while (!work_.empty()) {
    auto [up, p] = work_.back();
    work_.pop_back();
    for (;;) {
      const int32_t e = elements_[p];
      if (e >= 0) {  // a byte set: a stack ready to step
        out.tops.push_back(node(p, up));
        break;
      }
      if (e == Grammar::kEnd) {  // the alternative is done: return to the frame below
        if (up < 0) {  // the bottom frame ends: the sentence, or a frame's context
          (up == kFrameBottom ? out.escaped : out.accept) = true;
          break;
        }
        const Node below = nodes_[static_cast<size_t>(up)];
        if (elements_[below.pos] >= 0) {  // the frame itself is the stack to keep
          out.tops.push_back(up);
          break;
        }
        p = below.pos;
        up = below.parent;
        continue;
      }
      // A rule reference: remember where to return (unless that is the end of this
      // alternative: a tail call keeps right recursion from growing the stack), then try
      // each alternative of the rule.
      const uint32_t next = p + 1;
      const int32_t ret = elements_[next] == Grammar::kEnd ? up : node(next, up);
      const auto& alts = grammar_->alternatives(Grammar::ref_rule(e));
      for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.emplace_back(ret, *it);
      break;
    }
  }
}

bool Matcher::same_stack(int32_t a, int32_t b) const {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    const Node& x = nodes_[static_cast<size_t>(a)];
    const Node& y = nodes_[static_cast<size_t>(b)];
    if (x.pos != y.pos) return false;
    a = x.parent;
    b = y.parent;
  }
  return true;
}

uint64_t Matcher::stack_hash(int32_t a) const {
  uint64_t h = 1469598103934665603ull;
  for (; a >= 0; a = nodes_[static_cast<size_t>(a)].parent) {
    h = (h ^ nodes_[static_cast<size_t>(a)].pos) * 1099511628211ull;
  }
  return h;
}

void Matcher::dedupe(State& s) {
  if (s.tops.size() < 2) return;
  hashed_.clear();
  for (int32_t t : s.tops) hashed_.emplace_back(stack_hash(t), t);
  std::sort(hashed_.begin(), hashed_.end());
  s.tops.clear();
  for (size_t i = 0; i < hashed_.size(); ++i) {
    bool repeat = false;
    for (size_t j = i; j-- > 0 && hashed_[j].first == hashed_[i].first;) {
      if (same_stack(hashed_[j].second, hashed_[i].second)) {
        repeat = true;
        break;
      }
    }
    if (!repeat && s.tops.size() < kMaxStacks) s.tops.push_back(hashed_[i].second);
  }
}

void Matcher::step(const State& from, uint8_t byte, State& to) {
  to.tops.clear();
  to.accept = false;
  to.escaped = from.escaped;
  const auto& sets = grammar_->byte_sets();
  for (int32_t t : from.tops) {
    const Node n = nodes_[static_cast<size_t>(t)];
    if (sets[static_cast<size_t>(elements_[n.pos])][byte]) expand(n.parent, n.pos + 1, to);
  }
  dedupe(to);
}

bool Matcher::advance(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t before = mark();
  State a = current_;
  for (char c : bytes) {
    step(a, static_cast<uint8_t>(c), scratch_);
    std::swap(a, scratch_);
    if (a.dead()) {
      rewind(before);
      return false;
    }
  }
  current_ = std::move(a);
  if (nodes_.size() > compact_at_) {
    compact();
    compact_at_ = std::max(kCompactAt, 4 * nodes_.size());
  }
  return true;
}

void Matcher::compact() {
  std::vector<Node> kept;
  std::unordered_map<int32_t, int32_t> moved;
  std::vector<int32_t> chain;
  for (int32_t& top : current_.tops) {
    chain.clear();
    for (int32_t a = top; a >= 0 && !moved.count(a); a = nodes_[static_cast<size_t>(a)].parent) {
      chain.push_back(a);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& n = nodes_[static_cast<size_t>(*it)];
      const int32_t parent = n.parent < 0 ? -1 : moved.at(n.parent);
      kept.push_back(Node{n.pos, parent});
      moved[*it] = static_cast<int32_t>(kept.size() - 1);
    }
    top = moved.at(top);
  }
  nodes_ = std::move(kept);
}

Matcher::State Matcher::frame(int32_t top, int depth, int64_t horizon, std::string& key) {
  std::vector<uint32_t> positions;
  for (int32_t a = top; a >= 0 && static_cast<int>(positions.size()) < depth;
       a = nodes_[static_cast<size_t>(a)].parent) {
    positions.push_back(nodes_[static_cast<size_t>(a)].pos);
  }
  // A position inside a repetition's chain is named by the chain, its offset in the rule and
  // the copies still needed / allowed, capped at `horizon`: rules that differ only beyond it
  // take the same texts of fewer than `horizon` bytes.
  key.clear();
  const auto put = [&](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (uint32_t p : positions) {
    const int32_t r = grammar_->rule_of(p);
    const Grammar::Chain& c = grammar_->chain(r);
    if (c.id < 0) {
      put(p);
      continue;
    }
    put(-1 - c.id);
    put(std::min(c.required, horizon));
    put(std::min(c.total, horizon));
    put(static_cast<int64_t>(p) - grammar_->alternatives(r).front());
  }
  int32_t below = kFrameBottom;
  for (auto it = positions.rbegin(); it != positions.rend(); ++it) below = node(*it, below);
  State s;
  s.tops.push_back(below);
  return s;
}

std::string Matcher::state_key() const {
  std::vector<std::string> stacks;
  for (int32_t t : current_.tops) {
    std::string s;
    for (int32_t a = t; a >= 0; a = nodes_[static_cast<size_t>(a)].parent) {
      const uint32_t pos = nodes_[static_cast<size_t>(a)].pos;
      s.append(reinterpret_cast<const char*>(&pos), sizeof pos);
    }
    stacks.push_back(std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(1, current_.accept ? 'a' : 'n');
  for (const auto& s : stacks) {
    const auto len = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&len), sizeof len);
    key += s;
  }
  return key;
}

}  // namespace kvattn::structured
