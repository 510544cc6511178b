#include "engine/sampling/penalties.h"

namespace kvattn {

TokenPenalties::TokenPenalties(const SamplingParams& params, std::span<const int32_t> prompt)
    : active_(params.has_penalties()),
      presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      repetition_(params.repetition_penalty) {
  if (!active_) return;
  for (int32_t t : prompt) touch(t);
}

size_t TokenPenalties::touch(int32_t token) {
  const auto [it, fresh] = index_.try_emplace(token, seen_.size());
  if (fresh) {
    seen_.push_back(token);
    generated_.push_back(0);
  }
  return it->second;
}

void TokenPenalties::on_generated(int32_t token) {
  if (!active_) return;
  ++generated_[touch(token)];
}

void TokenPenalties::apply(std::span<float> logits) const {
  for (size_t i = 0; i < seen_.size(); ++i) {
    const auto t = static_cast<size_t>(seen_[i]);
    if (t >= logits.size()) continue;
    float& x = logits[t];
    if (repetition_ != 1.0f) x = x > 0.0f ? x / repetition_ : x * repetition_;
    if (generated_[i] > 0) {
      x -= frequency_ * static_cast<float>(generated_[i]) + presence_;
    }
  }
}

}  // namespace kvattn
