// TeamTuner with synthetic step times: it starts on one thread, moves to all threads only
// when they are clearly cheaper, and bounds what probing a bad choice costs.
#include "engine/model/team_tuner.h"

#include <gtest/gtest.h>

namespace kvattn::cpu_model {
namespace {

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
  TeamTuner fixed(8, 3), single(1, 0);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(fixed.begin(1), 3);
    fixed.end(1.0);
    EXPECT_EQ(single.begin(1), 1);
    single.end(1.0);
  }
}

TEST(TeamTuner, StartsOnOneThreadAndRarelyRetriesASlowTeam) {
  TeamTuner t(2, 0);
  EXPECT_EQ(t.begin(1), 1);
  t.end(0.02);
  // All threads 50x slower: at most one probe step early, then only ~every 16 * 50 steps.
  EXPECT_LE(run(t, 1000, 0.02, 1.0), 2);
}

TEST(TeamTuner, MovesToAllThreadsWhenClearlyFaster) {
  TeamTuner t(2, 0);
  const int with_all = run(t, 200, 0.02, 0.01);
  // Unless the machine running this test is oversubscribed (the pre-trial barrier probe then
  // vetoes the team), almost every step after the first few uses all threads.
  if (with_all > 0) EXPECT_GE(with_all, 150);
  // Prefill-sized steps are tuned separately and still start on one thread.
  EXPECT_EQ(t.begin(100), 1);
  t.end(1.0);
}

TEST(TeamTuner, LeavesAllThreadsWhenTheyTurnSlow) {
  TeamTuner t(2, 0);
  if (run(t, 50, 0.02, 0.01) == 0) GTEST_SKIP() << "machine oversubscribed: team never adopted";
  // The load rises: all threads now 100x slower. The regret rule reacts within a step or two.
  EXPECT_LE(run(t, 100, 0.02, 2.0), 3);
}

}  // namespace
}  // namespace kvattn::cpu_model
