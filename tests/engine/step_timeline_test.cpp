// summarize_step_timeline (model.h): busy time, gaps and their order statistics from step
// start/end times, on hand-worked timelines; and the CPU model has no timeline.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "engine_test_util.h"
#include "kvattn/core/error.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"

namespace kvattn {
namespace {

TEST(StepTimeline, SumsAndOrderStatisticsOfTheGaps) {
  // Steps of 1, 2, 3, 1, 2 (busy 9); gaps 0.5, 4, 1, 2 (sum 7.5): span 16.5.
  const std::vector<double> starts = {0.0, 1.5, 7.5, 11.5, 14.5};
  const std::vector<double> ends = {1.0, 3.5, 10.5, 12.5, 16.5};
  const StepTimeline t = summarize_step_timeline(starts, ends);
  EXPECT_EQ(t.steps, 5);
  EXPECT_DOUBLE_EQ(t.span_s, 16.5);
  EXPECT_DOUBLE_EQ(t.busy_s, 9.0);
  EXPECT_DOUBLE_EQ(t.gap_s, 7.5);
  EXPECT_DOUBLE_EQ(t.gap_median_s, 1.0);  // nearest rank of {0.5, 1, 2, 4}: the 2nd
  EXPECT_DOUBLE_EQ(t.gap_p90_s, 4.0);
  EXPECT_DOUBLE_EQ(t.gap_max_s, 4.0);
}

TEST(StepTimeline, EdgeCases) {
  const StepTimeline none = summarize_step_timeline({}, {});
  EXPECT_EQ(none.steps, 0);
  EXPECT_EQ(none.span_s, 0.0);
  const std::vector<double> s1 = {2.0}, e1 = {2.25};
  const StepTimeline one = summarize_step_timeline(s1, e1);
  EXPECT_EQ(one.steps, 1);
  EXPECT_DOUBLE_EQ(one.busy_s, 0.25);
  EXPECT_DOUBLE_EQ(one.span_s, 0.25);
  EXPECT_EQ(one.gap_s, 0.0);
  EXPECT_EQ(one.gap_max_s, 0.0);
  // A start measured a hair before the previous end (clock rounding): a zero gap.
  const std::vector<double> s2 = {0.0, 0.999999}, e2 = {1.0, 2.0};
  const StepTimeline overlap = summarize_step_timeline(s2, e2);
  EXPECT_EQ(overlap.gap_s, 0.0);
  EXPECT_EQ(overlap.gap_max_s, 0.0);
  const std::vector<double> e3 = {1.0};
  EXPECT_THROW(summarize_step_timeline(s2, e3), Error);
}

TEST(StepTimeline, TheCpuModelRecordsNone) {
  LLMOptions o;
  o.kv_cache_bytes = 4 << 20;
  o.step_timeline = true;
  LLM llm(load_hf_model(test::checkpoint("tiny_llama")), std::nullopt, o);
  llm.generate(std::vector<std::vector<int32_t>>{{1, 2, 3}}, test::greedy(2));
  EXPECT_FALSE(llm.step_timeline().has_value());
}

}  // namespace
}  // namespace kvattn
