// Internal: chooses the OpenMP team size of each CPU model step from measured step times.
//
// On an idle machine every core helps (decode ~1.7x with two). On an oversubscribed one (a
// shared box, ctest -j) a team that must meet at ~150 barriers per token can run 50x slower
// than one thread: each barrier waits for a descheduled peer's next time slice.
// - Prefill-sized steps (more than kStreamingMaxRows rows) take all threads unless up to 8
//   empty parallel regions, timed first, already wait for time slices: their regions carry enough
//   work that a team's barriers cost little on free cores, and such a step may be one long
//   prompt's whole prefill, so neither a one-thread start nor a one-thread trial step (which
//   doubles that prompt's time to first token) is affordable.
// - Decode-sized steps learn from the steps themselves (a probe at start-up cannot tell:
//   fresh threads are scheduled eagerly). They start with one thread (the choice with the
//   bounded downside); now and then one step runs with the other choice, which takes over if
//   cheaper per token (all threads must win by 15%: their gain is bounded, their loss is
//   not). Before such a step with all threads the 8 empty regions are timed; if they already
//   wait for time slices the step is not run and counts as lost. A losing challenger is
//   retried less often the more it lost by, so probing costs at most ~1/16 of the time; an
//   incumbent that becomes twice as costly as the other choice last measured is challenged
//   at once.
#pragma once

#include <cstdint>
#include <functional>

namespace kvattn::cpu_model {

// Mean wall time of an empty parallel region of `threads` threads (a barrier round trip):
// microseconds when the cores are free, milliseconds when a peer waits for a time slice.
// Over 8 rounds, or fewer once those run already exceed 8 slow round trips in all.
double barrier_seconds(int threads);

class TeamTuner {
 public:
  using BarrierProbe = std::function<double(int threads)>;
  // fixed > 0: always that many threads (no tuning). Otherwise choose between max_threads and 1.
  // `probe` times a barrier before a trial step with all threads (tests inject a fixed one).
  TeamTuner(int max_threads, int fixed, BarrierProbe probe = barrier_seconds);

  // The team size for a step of `tokens` rows; call end() with its wall time afterwards.
  int begin(int64_t tokens);
  void end(double seconds);

  static constexpr int64_t kFirstTrial = 4;
  static constexpr int64_t kMinInterval = 16;
  static constexpr int64_t kMaxInterval = 4096;

 private:
  struct Stats {
    int incumbent = 1;                 // 0: all threads, 1: one thread
    double cost[2] = {0.0, 0.0};       // seconds per token by choice (0: never measured)
    int64_t until_trial = kFirstTrial; // incumbent steps before the next challenge
    int64_t interval = kMinInterval;
  };
  int threads(int choice) const { return choice == 0 ? max_threads_ : 1; }
  // The challenger lost at `challenger_cost` per token: retry later, the later the worse.
  void lose(Stats& s, double challenger_cost);

  int max_threads_;
  int fixed_;
  BarrierProbe probe_;
  Stats decode_;  // decode-sized steps' choice (prefill-sized ones only probe)
  bool prefill_ = false;  // the current step is prefill-sized
  int choice_ = 1;
  int64_t tokens_ = 0;
};

}  // namespace kvattn::cpu_model
