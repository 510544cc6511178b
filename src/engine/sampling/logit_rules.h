// Internal: what one sample does to its logits before drawing, on the host: the request's
// allowed_token_ids (every other id masked), its bad_words_ids, its logit_bias, then the
// presence / frequency / repetition penalties (vLLM's order), with the state they need (which
// tokens the prompt holds, how often each was generated, the output for multi-token words),
// and a structured output's grammar (structured/token_constraint.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/structured/token_constraint.h"
#include "kvattn/engine/sampler.h"

namespace kvattn {

class LogitRules {
 public:
  // Inactive (apply() never called) unless params has allowed_token_ids, bad_words_ids, a
  // logit_bias or penalties, or, while
  // fewer than params.min_tokens tokens were generated, ids to hold back: params'
  // stop_token_ids and, without ignore_eos, `eos_ids` (the model's end tokens).
  // `grammar` (with `vocab` and the grammar's shared `frames`): params.structured compiled;
  // the end ids it lets through once the text is whole are `eos_ids` and params'
  // stop_token_ids.
  LogitRules(const SamplingParams& params, std::span<const int32_t> prompt,
             std::span<const int32_t> eos_ids = {},
             std::shared_ptr<const structured::Grammar> grammar = nullptr,
             std::shared_ptr<const structured::TokenBytes> vocab = nullptr,
             std::shared_ptr<structured::FrameMasks> frames = nullptr);
  bool active() const { return active_ || holding() || constraint_.has_value(); }
  // True while min_tokens holds the end ids back (they are masked to -inf by apply()).
  bool holding() const { return generated_total_ < min_tokens_ && !held_.empty(); }
  void on_generated(int32_t token);
  // A structured output is complete: only an end id may come (min_tokens yields to it).
  bool structure_complete() const { return constraint_ && constraint_->complete(); }
  // The rules on `logits` (the full vocabulary row), in place. Touches only the biased
  // tokens and the tokens seen so far, and with allowed_token_ids or a grammar the whole row.
  // Not const: the grammar keeps masks of the states it has seen.
  void apply(std::span<float> logits);

 private:
  size_t touch(int32_t token);  // the token's index in seen_

  bool active_ = false;
  bool penalties_ = false;
  int64_t min_tokens_ = 0;
  int64_t generated_total_ = 0;
  std::vector<int32_t> held_;  // ids masked while holding()
  float presence_ = 0.0f, frequency_ = 0.0f, repetition_ = 1.0f;
  std::vector<std::pair<int32_t, float>> bias_;
  std::vector<int32_t> allowed_;  // sorted, unique; empty: every id
  std::vector<std::vector<int32_t>> bad_words_;
  bool track_output_ = false;    // a bad word spans tokens: output_ is kept
  std::vector<int32_t> output_;  // the generated tokens
  // Per seen token (prompt or output), in first-seen order, and its count among the
  // generated tokens: the sample's distinct tokens, no vocabulary-sized state.
  std::vector<int32_t> seen_;
  std::vector<int32_t> generated_;  // parallel to seen_
  std::unordered_map<int32_t, size_t> index_;  // token -> its entry
  std::optional<structured::TokenConstraint> constraint_;
};

}  // namespace kvattn
