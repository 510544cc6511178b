// Internal: a grammar applied to decoding. Which vocabulary tokens may come next is what the
// grammar allows of each token's bytes from the current state; the end tokens may come only
// where the text so far is a whole sentence of the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/matcher.h"

namespace kvattn::structured {

// The vocabulary's bytes in sorted order: a search over it shares the grammar steps of
// common prefixes (a trie walked in order).
class TokenBytes {
 public:
  // bytes[id]; ids with `eligible[id]` false (special tokens) or empty bytes never match.
  TokenBytes(std::vector<std::string> token_bytes, const std::vector<bool>& eligible);

  size_t vocab_size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool eligible(int32_t id) const { return eligible_[static_cast<size_t>(id)]; }
  // One eligible id per byte value that some token spells alone.
  const std::vector<int32_t>& single_bytes() const { return single_bytes_; }
  // The eligible ids sorted by their bytes.
  const std::vector<int32_t>& order() const { return order_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> eligible_;
  std::vector<int32_t> order_;
  std::vector<int32_t> single_bytes_;
};

// What a parse stack's top frames take of a vocabulary, whatever lies below them, by the
// frames' grammar positions (Matcher::frame): `taken` (bits by id) and the entries (indices
// into TokenBytes::order()) that leave the frames, to be walked from the whole state. One per
// grammar and vocabulary, shared by every sample of it (the engine's thread only).
struct FrameMasks {
  struct Mask {
    std::vector<uint64_t> taken;
    std::vector<uint32_t> escaped;
  };
  static constexpr size_t kMaxFrames = 512;  // then it starts over
  std::unordered_map<std::string, Mask> by_key;
};

class TokenConstraint {
 public:
  // end_ids: the tokens that end the output (the model's end tokens, stop_token_ids).
  // `frames`: the grammar's shared FrameMasks (null: this constraint keeps its own).
  // `work_budget`: matcher steps (times the stacks stepped) one mask may take; a state whose
  // mask would take more (a very ambiguous grammar) falls back to checking the most likely
  // tokens one by one (candidates()), so that no request holds up the others' steps.
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenBytes> vocab,
                  std::vector<int32_t> end_ids, std::shared_ptr<FrameMasks> frames = nullptr,
                  int64_t work_budget = kWorkBudget);
  static constexpr int64_t kWorkBudget = 1'000'000;  // ~0.1-0.4 s of one core
  static constexpr size_t kCandidates = 64;
  // A state of more parse stacks than this goes to the candidates at once: its mask would
  // cost about that many times a simple state's (ambiguous regexes such as .{0,300}.{0,300}).
  static constexpr size_t kMaxStacksForMask = 64;

  // -inf on every id that may not come next (ids past the vocabulary included). Exact, except
  // past the work budget, where only the most likely tokens that fit survive.
  void apply(std::span<float> logits);
  bool allows(int32_t token);
  // The grammar is complete and allows nothing more: only the end ids may come.
  bool complete() const { return !matcher_.can_continue(); }
  // The sample's next token. An end id or a token the grammar does not allow (a caller that
  // drew without apply()) leaves the state as it is; the latter then allows only the end ids.
  void on_generated(int32_t token);

 private:
  // Bit i: eligible id i allowed by the grammar from the current state (end ids aside); null
  // when the mask would exceed the work budget.
  const std::vector<uint64_t>* allowed_bits();
  bool takes(int32_t token);                 // the grammar takes the token's bytes now
  void candidates(std::span<float> logits);  // apply() past the budget
  bool is_end(int32_t token) const;

  const FrameMasks::Mask* frame_mask(int32_t top);  // null: out of budget
  // Walks `entries` (ascending indices into the vocabulary's order) from `start`: taken(e)
  // for an entry whose bytes the grammar takes whole, escaped(e) for one a frame state lets
  // go below its frames.
  // False when the work budget ran out first.
  template <typename Taken, typename Escaped>
  bool walk(const Matcher::State& start, std::span<const uint32_t> entries, Taken&& taken,
            Escaped&& escaped);

  static constexpr size_t kCachedStates = 16;
  // Two frames hold, e.g., a JSON string's character and its closing quote: every string of
  // the grammar shares one FrameMask, and only tokens that close the string are walked per
  // state.
  static constexpr int kFrameDepth = 2;
  // Frame masks cover tokens of at most this many bytes (all but ~75 of SmolLM2's 49k), so
  // that a repetition's rules more than this many copies from their bounds share them.
  static constexpr size_t kHorizon = 24;

  Matcher matcher_;
  std::shared_ptr<const TokenBytes> vocab_;
  std::vector<int32_t> end_ids_;  // sorted
  bool broken_ = false;           // a token outside the grammar was taken
  int64_t work_budget_;
  int64_t work_left_ = 0;
  // Masks of recent states, most recent first: inside a JSON string the state repeats. An
  // empty mask: the state is past the work budget.
  std::vector<std::pair<std::string, std::vector<uint64_t>>> cache_;
  std::shared_ptr<FrameMasks> frames_;
  // Indices into the vocabulary's order of the entries of at most kHorizon bytes, and of the
  // longer ones.
  std::vector<uint32_t> short_entries_, long_entries_;
  std::vector<Matcher::State> path_;  // the search's state after each byte of a prefix
  std::vector<std::pair<int32_t, float>> ends_;  // apply()'s end ids and their logits
};

}  // namespace kvattn::structured
