// Internal: one sample's penalty state (SamplingParams::presence_penalty, frequency_penalty,
// repetition_penalty): which tokens its prompt holds and how often it generated each, and
// their application to a row of logits.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvattn/engine/sampler.h"

namespace kvattn {

class TokenPenalties {
 public:
  // Inactive (apply() never called) unless params.has_penalties().
  TokenPenalties(const SamplingParams& params, std::span<const int32_t> prompt);
  bool active() const { return active_; }
  void on_generated(int32_t token);
  // The penalties on `logits` (the full vocabulary row), in place: repetition first, then
  // frequency and presence (vLLM's order). Touches only tokens seen so far.
  void apply(std::span<float> logits) const;

 private:
  size_t touch(int32_t token);  // the token's index in seen_

  bool active_ = false;
  float presence_ = 0.0f, frequency_ = 0.0f, repetition_ = 1.0f;
  // Per seen token (prompt or output), in first-seen order, and its count among the
  // generated tokens: the sample's distinct tokens, no vocabulary-sized state.
  std::vector<int32_t> seen_;
  std::vector<int32_t> generated_;  // parallel to seen_
  std::unordered_map<int32_t, size_t> index_;  // token -> its entry
};

}  // namespace kvattn
