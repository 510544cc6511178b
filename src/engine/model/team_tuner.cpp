#include "engine/model/team_tuner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "engine/model/weight_matrix.h"

namespace kvattn::cpu_model {
namespace {

// Mean wall time of an empty parallel region of `threads` threads (a barrier round trip).
double barrier_seconds(int threads) {
  constexpr int kRounds = 16;
  volatile int sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
#pragma omp parallel num_threads(threads)
    { sink = omp_get_thread_num(); }
  }
  (void)sink;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kRounds;
}

}  // namespace

TeamTuner::TeamTuner(int max_threads, int fixed)
    : max_threads_(max_threads < 1 ? 1 : max_threads), fixed_(fixed) {
  if (fixed_ > 0 || max_threads_ == 1) return;
  barrier_seconds(max_threads_);  // warm the pool up
  // Idle machines meet in a few microseconds; 100 us means peers wait for a time slice.
  const double barrier = barrier_seconds(max_threads_);
  preferred_ = barrier > 100e-6 ? 1 : 0;
  // All threads preferred: check one thread early, it costs little if the probe was right and
  // saves much if the load rose since. Barriers of a millisecond or more: all threads is
  // likely far slower; try it late.
  const int64_t first = preferred_ == 0 ? 4 : barrier > 1e-3 ? 8 * kMinExplore : kMinExplore;
  for (Stats& s : classes_) s.next_explore = first;
}

int TeamTuner::begin(int64_t tokens) {
  tokens_ = tokens < 1 ? 1 : tokens;
  if (fixed_ > 0) return fixed_;
  if (max_threads_ == 1) return 1;
  cls_ = tokens <= kStreamingMaxRows ? 0 : 1;
  Stats& s = classes_[cls_];
  exploring_ = false;
  // Until both are measured, the probe's pick counts as the better one.
  const int best = s.trials[0] == 0 || s.trials[1] == 0 ? preferred_
                                                        : (s.cost[0] <= s.cost[1] ? 0 : 1);
  choice_ = best;
  if (s.trials[best] > 0 && --s.next_explore <= 0) {
    choice_ = 1 - best;
    exploring_ = true;
  }
  return choice_ == 0 ? max_threads_ : 1;
}

void TeamTuner::end(double seconds) {
  if (fixed_ > 0 || max_threads_ == 1) return;
  Stats& s = classes_[cls_];
  const double per_token = seconds / static_cast<double>(tokens_);
  const int before = s.trials[0] == 0 || s.trials[1] == 0 ? preferred_
                                                          : (s.cost[0] <= s.cost[1] ? 0 : 1);
  double& c = s.cost[choice_];
  c = s.trials[choice_] == 0 ? per_token : 0.5 * c + 0.5 * per_token;
  ++s.trials[choice_];
  if (exploring_) {
    const int after = s.cost[0] <= s.cost[1] ? 0 : 1;
    // Lost again: look less often, and so rarely that a probe costs at most ~1/16 of the time
    // (a probe slower by a factor r waits 16 r steps). Won: the load changed, watch closely.
    if (after == before) {
      const double r = s.cost[1 - after] / std::max(s.cost[after], 1e-12);
      s.interval = std::min<int64_t>(
          kMaxExplore, std::max<int64_t>(2 * s.interval, static_cast<int64_t>(16.0 * r)));
    } else {
      s.interval = kMinExplore;
    }
    s.next_explore = s.interval;
  }
}

}  // namespace kvattn::cpu_model
