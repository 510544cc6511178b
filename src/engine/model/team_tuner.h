// Internal: chooses the OpenMP team size of each CPU model step from measured step times.
//
// On an idle machine every core helps. On an oversubscribed one (a shared box, ctest -j) a
// team of two threads that must meet at ~150 barriers per token can run 10x slower than one
// thread, because each barrier waits for a descheduled peer. So:
// - at construction a probe times a few empty parallel regions; slow barriers mean "start
//   with one thread";
// - then the model times its steps, decode-sized and prefill-sized apart, and uses the choice
//   (all threads or one) with the lower cost per token, re-trying the other one now and then,
//   less often each time it loses (and the more rarely the more it lost by), so the choice
//   follows the load while the probing costs at most ~1/16 of the time.
#pragma once

#include <cstdint>

namespace kvattn::cpu_model {

class TeamTuner {
 public:
  // fixed > 0: always that many threads (no tuning). Otherwise choose between max_threads and 1.
  TeamTuner(int max_threads, int fixed);

  // The team size for a step of `tokens` rows; call end() with its wall time afterwards.
  int begin(int64_t tokens);
  void end(double seconds);

  static constexpr int64_t kMinExplore = 16;
  static constexpr int64_t kMaxExplore = 4096;

 private:
  struct Stats {
    double cost[2] = {0.0, 0.0};  // EMA of seconds per token: [all threads, one thread]
    int trials[2] = {0, 0};
    int64_t next_explore = kMinExplore;  // steps until the losing choice is tried again
    int64_t interval = kMinExplore;
  };
  int max_threads_;
  int fixed_;
  int preferred_ = 0;  // the probe's pick, tried first
  Stats classes_[2];   // [decode-sized, prefill-sized]
  int cls_ = 0, choice_ = 0;
  bool exploring_ = false;
  int64_t tokens_ = 0;
};

}  // namespace kvattn::cpu_model
