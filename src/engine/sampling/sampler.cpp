#include "kvattn/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvattn/core/error.h"

namespace kvattn {

void validate(const SamplingParams& p) {
  KVATTN_CHECK(std::isfinite(p.temperature), "SamplingParams: temperature must be finite but is ",
               p.temperature);
  KVATTN_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f,
               "SamplingParams: top_p must be in (0, 1] but is ", p.top_p);
  KVATTN_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f,
               "SamplingParams: min_p must be in [0, 1] but is ", p.min_p);
  KVATTN_CHECK(p.max_tokens >= 0, "SamplingParams: max_tokens must be >= 0 but is ",
               p.max_tokens);
  KVATTN_CHECK(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens,
               "SamplingParams: min_tokens must be in [0, max_tokens = ", p.max_tokens,
               "] but is ", p.min_tokens);
  KVATTN_CHECK(p.n >= 1, "SamplingParams: n must be >= 1 but is ", p.n);
  KVATTN_CHECK(p.detokenize || p.stop.empty(), "SamplingParams: stop strings need text, so ",
               "detokenize must be true but is false (", p.stop.size(), " stop strings given)");
  for (const auto& s : p.stop) {
    KVATTN_CHECK(!s.empty(), "SamplingParams: stop strings must not be empty");
  }
  for (auto [name, v] : {std::pair{"presence_penalty", p.presence_penalty},
                         std::pair{"frequency_penalty", p.frequency_penalty}}) {
    KVATTN_CHECK(v >= -2.0f && v <= 2.0f, "SamplingParams: ", name, " must be in [-2, 2] but is ",
                 v);
  }
  KVATTN_CHECK(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty),
               "SamplingParams: repetition_penalty must be finite and > 0 (1 = off) but is ",
               p.repetition_penalty);
  for (const auto& [token, bias] : p.logit_bias) {
    KVATTN_CHECK(token >= 0, "SamplingParams: logit_bias token ", token, " is negative");
    KVATTN_CHECK(bias >= -100.0f && bias <= 100.0f, "SamplingParams: logit_bias of token ", token,
                 " must be in [-100, 100] but is ", bias);
  }
  for (const auto& seq : p.bad_words_ids) {
    KVATTN_CHECK(!seq.empty(), "SamplingParams: bad_words_ids holds an empty sequence");
    for (int32_t token : seq) {
      KVATTN_CHECK(token >= 0, "SamplingParams: bad_words_ids holds ", token, ", a negative id");
    }
  }
  for (int32_t token : p.allowed_token_ids) {
    KVATTN_CHECK(token >= 0, "SamplingParams: allowed_token_ids holds ", token, ", a negative id");
  }
  KVATTN_CHECK(p.logprobs >= -1 && p.logprobs <= SamplingParams::kMaxLogprobs,
               "SamplingParams: logprobs must be -1 (off) or in [0, ", SamplingParams::kMaxLogprobs,
               "] but is ", p.logprobs);
  KVATTN_CHECK(p.prompt_logprobs >= -1 && p.prompt_logprobs <= SamplingParams::kMaxLogprobs,
               "SamplingParams: prompt_logprobs must be -1 (off) or in [0, ",
               SamplingParams::kMaxLogprobs, "] but is ", p.prompt_logprobs);
  if (p.structured.active()) {
    KVATTN_CHECK(!p.ignore_eos, "SamplingParams: ignore_eos cannot go with structured output "
                 "(the output ends at an end token once the structure is complete)");
    KVATTN_CHECK(p.structured.kind == StructuredOutput::Kind::kChoice ||
                     p.structured.kind == StructuredOutput::Kind::kJsonObject ||
                     !p.structured.spec.empty(),
                 "SamplingParams: structured output needs its spec (a JSON schema, a regex or "
                 "a grammar)");
    KVATTN_CHECK(p.structured.kind != StructuredOutput::Kind::kChoice ||
                     !p.structured.choices.empty(),
                 "SamplingParams: structured output of kind choice needs at least one choice");
  }
}

int32_t argmax(std::span<const float> logits) {
  KVATTN_CHECK(!logits.empty(), "argmax: logits are empty");
  int32_t best = 0;
  float best_v = logits[0];
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > best_v || (std::isnan(best_v) && !std::isnan(logits[i]))) {
      best_v = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

namespace {

// Deterministic across standard libraries (unlike std::uniform_real_distribution).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::mt19937_64 seeded(uint64_t seed, uint64_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return std::mt19937_64(seq);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, uint64_t stream_index)
    : params_(params), rng_(seeded(params.seed, stream_index)) {
  validate(params_);
}

void Sampler::filter(std::span<const float> logits) {
  const auto vocab = static_cast<int32_t>(logits.size());
  KVATTN_CHECK(vocab > 0, "Sampler: logits are empty");
  if (greedy_sampling(params_.temperature, params_.top_k)) {
    cand_.assign(1, argmax(logits));
    probs_.assign(1, 1.0f);
    return;
  }
  // Higher logit first; equal logits by lower id, so the result is deterministic.
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  cand_.resize(vocab);
  std::iota(cand_.begin(), cand_.end(), 0);
  if (params_.top_k > 0 && params_.top_k < vocab) {
    std::nth_element(cand_.begin(), cand_.begin() + params_.top_k - 1, cand_.end(), better);
    cand_.resize(params_.top_k);
  }
  float max_logit = -INFINITY;
  for (int32_t id : cand_) max_logit = std::max(max_logit, logits[id]);
  KVATTN_CHECK(std::isfinite(max_logit), "Sampler: logits have no finite maximum");
  const float inv_t = 1.0f / params_.temperature;
  probs_.resize(cand_.size());
  double total = 0.0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    probs_[i] = std::exp((logits[cand_[i]] - max_logit) * inv_t);  // the max has p = 1
    total += probs_[i];
  }

  auto keep_if = [&](auto pred) {
    size_t w = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (pred(probs_[i], cand_[i])) {
        cand_[w] = cand_[i];
        probs_[w] = probs_[i];
        ++w;
      }
    }
    cand_.resize(w);
    probs_.resize(w);
  };

  if (params_.top_p < 1.0f) {
    // Tokens below t = (1 - top_p) * total / n carry less than (1 - top_p) of the mass
    // together, so the nucleus lies inside {p >= t}: sort only those.
    const double t = (1.0 - params_.top_p) * total / static_cast<double>(cand_.size());
    keep_if([&](float p, int32_t) { return p >= t; });
    order_.resize(cand_.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
      return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && cand_[a] < cand_[b]);
    });
    const double target = params_.top_p * total;
    double cum = 0.0;
    size_t keep = order_.size();
    for (size_t i = 0; i < order_.size(); ++i) {
      cum += probs_[order_[i]];
      if (cum >= target) {
        keep = i + 1;
        break;
      }
    }
    scratch_ids_.resize(keep);
    scratch_probs_.resize(keep);
    for (size_t i = 0; i < keep; ++i) {
      scratch_ids_[i] = cand_[order_[i]];
      scratch_probs_[i] = probs_[order_[i]];
    }
    cand_.swap(scratch_ids_);
    probs_.swap(scratch_probs_);
  }
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p;  // relative to p_max == 1
    keep_if([&](float p, int32_t) { return p >= floor; });
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  filter(logits);
  if (cand_.size() == 1) return cand_[0];
  double total = 0.0;
  for (float p : probs_) total += p;
  const double u = uniform01(rng_) * total;
  double cum = 0.0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    cum += probs_[i];
    if (u < cum) return cand_[i];
  }
  return cand_.back();
}

std::vector<float> Sampler::probabilities(std::span<const float> logits) {
  filter(logits);
  double total = 0.0;
  for (float p : probs_) total += p;
  std::vector<float> out(logits.size(), 0.0f);
  for (size_t i = 0; i < cand_.size(); ++i) {
    out[cand_[i]] = static_cast<float>(probs_[i] / total);
  }
  return out;
}

// ---- stop strings ----

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_match)
    : stops_(std::move(stops)), include_match_(include_match) {
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view piece) {
  Result r;
  if (stops_.empty()) {
    r.emit.assign(piece);
    return r;
  }
  held_.append(piece);
  // The earliest match; at one position the longest stop string (what vLLM's order-based
  // search would need the list sorted for), so that "included" text is the whole match.
  size_t first = std::string::npos, length = 0;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first || (at == first && at != std::string::npos && s.size() > length)) {
      first = at;
      length = s.size();
    }
  }
  if (first != std::string::npos) {
    r.emit = held_.substr(0, include_match_ ? first + length : first);
    r.stopped = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (size_t len = std::min(held_.size(), max_stop_ - 1); len > 0; --len) {
    std::string_view tail(held_.data() + held_.size() - len, len);
    bool prefix = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return s.size() > len && std::string_view(s).substr(0, len) == tail;
    });
    if (prefix) {
      hold = len;
      break;
    }
  }
  r.emit = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace kvattn
