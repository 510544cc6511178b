// token_logprobs: a generated token's log-probability and the most likely alternatives
// (SamplingParams::logprobs), from one row of raw logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvattn/core/error.h"
#include "kvattn/engine/sampler.h"

namespace kvattn {
namespace {

// a ranks before b: the larger logit, then the lower id; NaN ranks last.
bool ranks_before(float a, int32_t ia, float b, int32_t ib) {
  if (std::isnan(b)) return !std::isnan(a) || ia < ib;
  if (std::isnan(a)) return false;
  return a > b || (a == b && ia < ib);
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  const auto v = static_cast<int64_t>(logits.size());
  KVATTN_CHECK(v > 0, "token_logprobs: logits are empty");
  KVATTN_CHECK(token >= 0 && token < v, "token_logprobs: token ", token,
               " is outside the vocabulary [0, ", v, ")");
  KVATTN_CHECK(top_n >= 0 && top_n <= SamplingParams::kMaxLogprobs, "token_logprobs: top_n must be ",
               "in [0, ", SamplingParams::kMaxLogprobs, "] but is ", top_n);
  // log-sum-exp in float64: max first, so no exp overflows.
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (float x : logits) {
    nan |= std::isnan(x);
    m = std::max(m, static_cast<double>(x));
  }
  // log p_i = (x_i - m) - log(sum_j exp(x_j - m)): subtracting m first keeps the small
  // differences of huge logits.
  double log_sum = 0.0;
  if (nan) {
    log_sum = std::numeric_limits<double>::quiet_NaN();
  } else if (std::isfinite(m)) {
    double sum = 0.0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - m);
    log_sum = std::log(sum);
  }  // all -inf: every log-probability is -inf - (-inf) = NaN, as the row has no mass
  // +inf logits: NaN or -inf log-probabilities; such rows mean a broken model either way,
  // and the values say so rather than hide it.
  auto logprob = [&](int64_t i) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(i)]) - m - log_sum);
  };
  TokenLogprobs out;
  out.logprob = logprob(token);
  if (top_n == 0) return out;
  // The top_n best in a small sorted array: one pass, an insertion for each newcomer.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(top_n) + 1);
  for (int64_t i = 0; i < v; ++i) {
    const float x = logits[static_cast<size_t>(i)];
    const auto id = static_cast<int32_t>(i);
    if (static_cast<int>(best.size()) == top_n &&
        !ranks_before(x, id, logits[static_cast<size_t>(best.back())], best.back())) {
      continue;
    }
    auto at = std::find_if(best.begin(), best.end(), [&](int32_t b) {
      return ranks_before(x, id, logits[static_cast<size_t>(b)], b);
    });
    best.insert(at, id);
    if (static_cast<int>(best.size()) > top_n) best.pop_back();
  }
  out.top.reserve(best.size());
  for (int32_t id : best) out.top.push_back({id, logprob(id)});
  return out;
}

}  // namespace kvattn
