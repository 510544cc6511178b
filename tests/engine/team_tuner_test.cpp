// TeamTuner with synthetic step times and an injected barrier probe (so the result does not
// depend on how loaded the machine running the test is): prefill-sized steps take all threads
// where barriers are quick; decode-sized ones start on one thread, move to all threads only
// when they are clearly cheaper, bound what probing a bad choice costs, and a slow barrier
// vetoes a step with all threads.
#include "engine/model/team_tuner.h"

#include <gtest/gtest.h>

namespace kvattn::cpu_model {
namespace {

// Barrier probes: cores free (2 us round trip) or a peer waiting for time slices (2 ms).
double free_cores(int) { return 2e-6; }
double busy_cores(int) { return 2e-3; }

// Runs `steps` steps of `tokens` rows (1: decode-sized) where one thread costs `one` seconds
// and all threads `all`; returns how many steps ran with all threads.
int run(TeamTuner& t, int steps, double one, double all, int64_t tokens = 1) {
  int with_all = 0;
  for (int i = 0; i < steps; ++i) {
    const int n = t.begin(tokens);
    with_all += n > 1;
    t.end(n > 1 ? all : one);
  }
  return with_all;
}

TEST(TeamTuner, FixedAndSingleCoreNeverTune) {
  TeamTuner fixed(8, 3, free_cores), single(1, 0, free_cores);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(fixed.begin(1), 3);
    fixed.end(1.0);
    EXPECT_EQ(single.begin(1), 1);
    single.end(1.0);
  }
}

TEST(TeamTuner, StartsOnOneThreadAndRarelyRetriesASlowTeam) {
  TeamTuner t(2, 0, free_cores);
  EXPECT_EQ(t.begin(1), 1);
  t.end(0.02);
  // All threads 50x slower: at most one probe step early, then only ~every 16 * 50 steps.
  EXPECT_LE(run(t, 1000, 0.02, 1.0), 2);
}

TEST(TeamTuner, MovesToAllThreadsWhenClearlyFaster) {
  TeamTuner t(2, 0, free_cores);
  // Almost every step after the first few uses all threads.
  EXPECT_GE(run(t, 200, 0.02, 0.01), 185);
  // Prefill-sized steps are chosen apart from decode's: all threads on free cores.
  EXPECT_EQ(t.begin(100), 2);
  t.end(1.0);
}

TEST(TeamTuner, PrefillTakesAllThreadsWhileBarriersAreQuick) {
  // A lone long prompt may be one step: it must neither start on one thread nor be picked
  // for a one-thread trial, whatever the decode steps between learned.
  TeamTuner t(4, 0, free_cores);
  int decode_with_all = 0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(t.begin(4096), 4) << "prefill step " << i;
    t.end(3.0);
    decode_with_all += run(t, 3, 0.02, 1.0);  // decode steps where all threads lose
  }
  EXPECT_LE(decode_with_all, 2);  // their own choice is still learned: one thread
}

TEST(TeamTuner, OneThreadWhenBarriersTurnSlow) {
  bool busy = false;
  TeamTuner t(2, 0, [&busy](int) { return busy ? 2e-3 : 2e-6; });
  ASSERT_GE(run(t, 50, 0.02, 0.01), 40);
  EXPECT_EQ(t.begin(1000), 2);
  t.end(1.0);
  // The load rises: from the next step on, the probes keep both kinds of step on one thread
  // (the decode-sized ones although all threads still lead by their last cost).
  busy = true;
  EXPECT_EQ(run(t, 100, 0.02, 0.01), 0);
  EXPECT_EQ(run(t, 20, 1.0, 0.5, 1000), 0);
  // Free again: prefill-sized steps at once, decode-sized ones as all threads win trials.
  busy = false;
  EXPECT_EQ(run(t, 5, 1.0, 0.5, 1000), 5);
  EXPECT_GE(run(t, 5000, 0.02, 0.01), 4500);
}

}  // namespace
}  // namespace kvattn::cpu_model
