#include "engine/model/team_tuner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "engine/model/weight_matrix.h"

namespace kvattn::cpu_model {
namespace {

// Parallel regions in one step of the model (4 GEMMs and attention per layer, and more).
constexpr double kRegionsPerStep = 150.0;
// An empty region's round trip above this means a peer waits for a time slice (free cores:
// a few microseconds).
constexpr double kSlowBarrier = 50e-6;

}  // namespace

double barrier_seconds(int threads) {
  // Stops once the rounds so far take more than kRounds slow round trips in all: the mean is
  // then above kSlowBarrier whatever the rest would take, and a busy machine (every prefill-
  // sized step probes) pays about one time slice, not eight.
  constexpr int kRounds = 8;
  volatile int sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  int rounds = 0;
  while (rounds < kRounds) {
#pragma omp parallel num_threads(threads)
    { sink = omp_get_thread_num(); }
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > kRounds * kSlowBarrier) break;
  }
  (void)sink;
  return elapsed / rounds;
}

TeamTuner::TeamTuner(int max_threads, int fixed, BarrierProbe probe)
    : max_threads_(max_threads < 1 ? 1 : max_threads), fixed_(fixed), probe_(std::move(probe)) {}

int TeamTuner::begin(int64_t tokens) {
  tokens_ = tokens < 1 ? 1 : tokens;
  if (fixed_ > 0) return fixed_;
  if (max_threads_ == 1) return 1;
  prefill_ = tokens > kStreamingMaxRows;
  if (prefill_) {
    choice_ = probe_(max_threads_) > kSlowBarrier ? 1 : 0;
    return threads(choice_);
  }
  Stats& s = decode_;
  const int other = 1 - s.incumbent;
  const bool regret = s.cost[other] > 0.0 && s.cost[s.incumbent] > 2.0 * s.cost[other];
  choice_ = (--s.until_trial <= 0 || regret) ? other : s.incumbent;
  if (choice_ == 0 && s.cost[1] > 0.0) {
    // Before a whole step with all threads, a few empty regions: if barriers already take
    // time slices, the step would cost ~kRegionsPerStep of them, so one thread runs it (a
    // challenge of all threads counts as lost unrun; leading, they face one thread's).
    const double barrier = probe_(max_threads_);
    if (barrier > kSlowBarrier) {
      if (s.incumbent == 1) {
        lose(s, s.cost[1] + kRegionsPerStep * barrier / static_cast<double>(tokens_));
      }
      choice_ = 1;
    }
  }
  return threads(choice_);
}

void TeamTuner::lose(Stats& s, double challenger_cost) {
  const double r = challenger_cost / std::max(s.cost[s.incumbent], 1e-12);
  s.interval = std::min<int64_t>(
      kMaxInterval, std::max<int64_t>(2 * s.interval, static_cast<int64_t>(16.0 * r)));
  s.until_trial = s.interval;
}

void TeamTuner::end(double seconds) {
  if (fixed_ > 0 || max_threads_ == 1 || prefill_) return;
  Stats& s = decode_;
  const double per_token = seconds / static_cast<double>(tokens_);
  if (choice_ == s.incumbent) {
    double& c = s.cost[choice_];
    c = c == 0.0 ? per_token : 0.7 * c + 0.3 * per_token;
    return;
  }
  // A challenge: one step of the other choice.
  s.cost[choice_] = per_token;
  const double incumbent = s.cost[s.incumbent];
  const double bar = choice_ == 0 ? 0.85 * incumbent : incumbent;
  if (incumbent == 0.0 || per_token < bar) {
    s.incumbent = choice_;
    s.interval = kMinInterval;  // the load changed: keep watching closely
    s.until_trial = s.interval;
  } else {
    lose(s, per_token);
  }
}

}  // namespace kvattn::cpu_model
