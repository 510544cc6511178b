// TeamTuner with synthetic step times and an injected barrier probe (so the result does not
// depend on how loaded the machine running the test is): it starts on one thread, moves to
// all threads only when they are clearly cheaper, bounds what probing a bad choice costs, and
// lets a slow barrier veto a trial.
#include "engine/model/team_tuner.h"

#include <gtest/gtest.h>

namespace kvattn::cpu_model {
namespace {

// Barrier probes: cores free (2 us round trip) or a peer waiting for time slices (2 ms).
double free_cores(int) { return 2e-6; }
double busy_cores(int) { return 2e-3; }

// Runs `steps` decode steps where one thread costs `one` seconds and all threads `all`;
// returns how many steps ran with all threads.
int run(TeamTuner& t, int steps, double one, double all) {
  int with_all = 0;
  for (int i = 0; i < steps; ++i) {
    const int n = t.begin(1);
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
  // Prefill-sized steps are tuned separately and still start on one thread.
  EXPECT_EQ(t.begin(100), 1);
  t.end(1.0);
}

TEST(TeamTuner, NeverTriesTheTeamWhileBarriersWaitForTimeSlices) {
  // All threads would be faster per step, but the probe says each of the ~150 barriers of a
  // step would wait ~2 ms: the trial counts as lost without running.
  TeamTuner t(2, 0, busy_cores);
  EXPECT_EQ(run(t, 500, 0.02, 0.01), 0);
}

TEST(TeamTuner, LeavesAllThreadsWhenTheyTurnSlow) {
  TeamTuner t(2, 0, free_cores);
  ASSERT_GE(run(t, 50, 0.02, 0.01), 40);
  // The load rises: all threads now 100x slower. The regret rule reacts within a step or two.
  EXPECT_LE(run(t, 100, 0.02, 2.0), 3);
}

}  // namespace
}  // namespace kvattn::cpu_model
