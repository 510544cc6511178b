#include "engine/sampling/logit_rules.h"

#include <algorithm>
#include <limits>

namespace kvattn {

LogitRules::LogitRules(const SamplingParams& params, std::span<const int32_t> prompt,
                       std::span<const int32_t> eos_ids,
                       std::shared_ptr<const structured::Grammar> grammar,
                       std::shared_ptr<const structured::TokenBytes> vocab,
                       std::shared_ptr<structured::FrameMasks> frames)
    : penalties_(params.has_penalties()),
      min_tokens_(params.min_tokens),
      presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      repetition_(params.repetition_penalty),
      bias_(params.logit_bias),
      allowed_(params.allowed_token_ids),
      bad_words_(params.bad_words_ids) {
  std::sort(allowed_.begin(), allowed_.end());
  allowed_.erase(std::unique(allowed_.begin(), allowed_.end()), allowed_.end());
  active_ = penalties_ || !bias_.empty() || !allowed_.empty() || !bad_words_.empty();
  track_output_ = std::any_of(bad_words_.begin(), bad_words_.end(),
                              [](const auto& w) { return w.size() > 1; });
  if (grammar != nullptr) {
    std::vector<int32_t> ends(eos_ids.begin(), eos_ids.end());
    ends.insert(ends.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
    constraint_.emplace(std::move(grammar), std::move(vocab), std::move(ends), std::move(frames));
  }
  if (min_tokens_ > 0) {
    held_ = params.stop_token_ids;
    if (!params.ignore_eos) held_.insert(held_.end(), eos_ids.begin(), eos_ids.end());
  }
  if (!penalties_) return;
  for (int32_t t : prompt) touch(t);
}

size_t LogitRules::touch(int32_t token) {
  const auto [it, fresh] = index_.try_emplace(token, seen_.size());
  if (fresh) {
    seen_.push_back(token);
    generated_.push_back(0);
  }
  return it->second;
}

void LogitRules::on_generated(int32_t token) {
  ++generated_total_;
  if (constraint_) constraint_->on_generated(token);
  if (track_output_) output_.push_back(token);
  if (!penalties_) return;
  ++generated_[touch(token)];
}

void LogitRules::apply(std::span<float> logits) {
  if (constraint_) constraint_->apply(logits);
  if (!allowed_.empty()) {  // -inf everywhere but the allowed ids (sorted, unique, >= 0)
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    const auto at = [&](size_t i) { return logits.begin() + static_cast<std::ptrdiff_t>(i); };
    size_t next = 0;  // the first id neither masked nor kept yet
    for (int32_t a : allowed_) {
      const auto keep = static_cast<size_t>(a);
      if (keep >= logits.size()) break;
      std::fill(at(next), at(keep), kMasked);
      next = keep + 1;
    }
    std::fill(at(std::min(next, logits.size())), logits.end(), kMasked);
  }
  // vLLM's NoBadWordsLogitsProcessor: a word's last token is banned where the output ends
  // with the rest of it (always, for a one-token word).
  for (const auto& w : bad_words_) {
    const size_t rest = w.size() - 1;
    if (rest > output_.size() ||
        !std::equal(w.begin(), w.end() - 1, output_.end() - static_cast<std::ptrdiff_t>(rest))) {
      continue;
    }
    const auto last = static_cast<size_t>(w.back());
    if (last < logits.size()) logits[last] = -std::numeric_limits<float>::infinity();
  }
  for (const auto& [token, bias] : bias_) {
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) logits[token] += bias;
  }
  for (size_t i = 0; i < seen_.size(); ++i) {
    const auto t = static_cast<size_t>(seen_[i]);
    if (t >= logits.size()) continue;
    float& x = logits[t];
    if (repetition_ != 1.0f) x = x > 0.0f ? x / repetition_ : x * repetition_;
    if (generated_[i] > 0) {
      x -= frequency_ * static_cast<float>(generated_[i]) + presence_;
    }
  }
  if (holding() && !structure_complete()) {
    for (int32_t t : held_) {
      if (t >= 0 && static_cast<size_t>(t) < logits.size()) {
        logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
      }
    }
  }
}

}  // namespace kvattn
