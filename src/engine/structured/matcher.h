// Internal: where a byte string stands in a Grammar, and which bytes may follow.
//
// The state is a set of parse stacks (a pushdown recognizer, as llama.cpp's grammar sampler
// keeps): each stack's top is a position at a byte-set element of some alternative, the frames
// below it the positions to return to. Stacks live in an arena as (position, parent) nodes,
// so that stepping shares every frame it does not change, and a search over many candidate
// continuations (token_constraint.h) can rewind the arena when it is done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/structured/grammar.h"

namespace kvattn::structured {

class Matcher {
 public:
  // A set of stacks (arena node ids of their tops) and whether the input so far is a whole
  // sentence of the grammar.
  struct State {
    std::vector<int32_t> tops;
    bool accept = false;
    // A frame's state (frame()): some path went below the frames it holds, into a context
    // it does not know. Kept once set along a search path.
    bool escaped = false;
    bool dead() const { return tops.empty() && !accept; }
  };
  // At most this many distinct stacks are kept after a step (ambiguous grammars can make
  // more; the rest are dropped). The grammars kvattn builds stay far below it.
  static constexpr size_t kMaxStacks = 4096;

  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes`; returns false and leaves the state as it was when the grammar does not
  // allow them here.
  bool advance(std::string_view bytes);
  bool can_end() const { return current_.accept; }
  bool can_continue() const { return !current_.tops.empty(); }
  // Equal keys mean equal states (the same stacks): what follows is allowed alike.
  std::string state_key() const;

  // For searches over continuations: `to` := `from` after `byte`. Nodes made on the way stay
  // in the arena until rewind(mark()) taken before the search.
  const State& current() const { return current_; }
  void step(const State& from, uint8_t byte, State& to);
  size_t mark() const { return nodes_.size(); }
  // The top `depth` frames of the stack whose top is `top`, as a state of their own over an
  // unknown context (a path that ends them sets State::escaped instead of accept), and `key`
  // := their positions, those inside a repetition chain named up to `horizon` copies ahead
  // (Grammar::Chain). What such a state takes without escaping, the full stack takes too,
  // whatever lies below; frames of equal keys take the same texts shorter than `horizon`
  // bytes: token_constraint.h caches per key.
  State frame(int32_t top, int depth, int64_t horizon, std::string& key);
  void rewind(size_t mark) { nodes_.resize(mark); }

 private:
  struct Node {
    uint32_t pos;    // an element of grammar_->elements()
    int32_t parent;  // the frame below; -1 at the bottom, kFrameBottom under a frame()
  };
  static constexpr int32_t kFrameBottom = -2;
  int32_t node(uint32_t pos, int32_t parent);
  // Adds to `out` every stack that continuing at `pos` above `parent` reaches with a byte set
  // on top (or `accept` when the bottom frame ends).
  void expand(int32_t parent, uint32_t pos, State& out);
  void dedupe(State& s);
  bool same_stack(int32_t a, int32_t b) const;
  uint64_t stack_hash(int32_t a) const;
  void compact();  // drops arena nodes no stack of current_ uses

  static constexpr size_t kCompactAt = size_t{1} << 16;  // arena nodes

  std::shared_ptr<const Grammar> grammar_;
  const int32_t* elements_ = nullptr;
  std::vector<Node> nodes_;
  size_t compact_at_ = kCompactAt;
  State current_;
  State scratch_;
  std::vector<std::pair<int32_t, uint32_t>> work_;
  std::vector<std::pair<uint64_t, int32_t>> hashed_;
};

}  // namespace kvattn::structured
