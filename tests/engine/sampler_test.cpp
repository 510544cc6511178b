// Sampler: greedy, the top-k / top-p / min-p masks against hand-computed distributions, the
// seed contract, the empirical distribution, and stop strings over streamed pieces.
#include "kvattn/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

// Logits whose temperature-1 softmax is exactly `probs`.
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<int> support(const std::vector<float>& p) {
  std::vector<int> ids;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

SamplingParams sampling(float t, int k = 0, float p = 1.0f, float min_p = 0.0f) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  return s;
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (uint64_t seed : {0u, 1u, 99u}) {
    SamplingParams s = sampling(0.0f);
    s.seed = seed;
    Sampler smp(s, 3);
    EXPECT_EQ(smp.sample(l), 1);
  }
  Sampler k1(sampling(1.0f, 1), 0);  // top_k == 1 is greedy too
  EXPECT_EQ(k1.sample(l), 1);
  EXPECT_EQ(support(Sampler(sampling(0.0f), 0).probabilities(l)), (std::vector<int>{1}));
  // Tiny and negative temperatures are greedy too: 1 / 1e-40 is infinite in float, and the
  // scaled logits would be inf / NaN (the CLI printed the last vocabulary id every step).
  for (float t : {1e-40f, 1e-30f, 9e-6f, -1.0f}) {
    Sampler tiny(sampling(t), 7);
    EXPECT_EQ(tiny.sample(l), 1) << t;
    EXPECT_EQ(support(tiny.probabilities(l)), (std::vector<int>{1})) << t;
  }
  EXPECT_FALSE(greedy_sampling(kGreedyTemperature, 0));
  EXPECT_TRUE(greedy_sampling(kGreedyTemperature, 1));
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
  std::vector<float> l = {1.0f, 0.0f, -2.0f, 0.5f};
  Sampler s(sampling(2.0f), 0);
  auto p = s.probabilities(l);
  double z = 0;
  for (float x : l) z += std::exp(x / 2.0);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(p[i], std::exp(l[i] / 2.0) / z, 1e-6);
}

TEST(Sampler, TopKKeepsTheKLargest) {
  std::vector<float> l = {0.3f, 5.0f, -1.0f, 4.0f, 2.0f, 4.5f};
  auto p = Sampler(sampling(1.0f, 3), 0).probabilities(l);
  EXPECT_EQ(support(p), (std::vector<int>{1, 3, 5}));
  const double z = std::exp(5.0) + std::exp(4.0) + std::exp(4.5);
  EXPECT_NEAR(p[3], std::exp(4.0) / z, 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  auto l = logits_for({0.05, 0.5, 0.15, 0.3});
  EXPECT_EQ(support(Sampler(sampling(1.0f, 0, 0.75f), 0).probabilities(l)),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(support(Sampler(sampling(1.0f, 0, 0.85f), 0).probabilities(l)),
            (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(support(Sampler(sampling(1.0f, 0, 0.4f), 0).probabilities(l)),
            (std::vector<int>{1}));
  auto p = Sampler(sampling(1.0f, 0, 0.75f), 0).probabilities(l);
  EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(p[3], 0.3 / 0.8, 1e-6);
}

TEST(Sampler, TopPOverALargeVocabularyMatchesAFullSort) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(5000);
  for (auto& x : l) x = nd(rng);
  const float top_p = 0.9f;
  auto p = Sampler(sampling(1.0f, 0, top_p), 0).probabilities(l);
  // Reference: sort everything, keep until the mass reaches top_p.
  std::vector<double> e(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += (e[i] = std::exp(static_cast<double>(l[i])));
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return e[a] > e[b]; });
  std::vector<int> ref;
  double cum = 0;
  for (int id : order) {
    ref.push_back(id);
    cum += e[id] / z;
    if (cum >= top_p) break;
  }
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(support(p), ref);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheMax) {
  auto l = logits_for({0.5, 0.3, 0.15, 0.05});
  // threshold 0.2 * 0.5 = 0.1
  EXPECT_EQ(support(Sampler(sampling(1.0f, 0, 1.0f, 0.2f), 0).probabilities(l)),
            (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(support(Sampler(sampling(1.0f, 0, 1.0f, 0.7f), 0).probabilities(l)),
            (std::vector<int>{0}));
}

TEST(Sampler, FiltersComposeTopKThenTopPThenMinP) {
  auto l = logits_for({0.4, 0.25, 0.2, 0.1, 0.05});
  // top-k 4 -> {0,1,2,3} renormalised by 0.95; top-p 0.7 -> 0.4/.95 + .25/.95 = .684 < .7,
  // so {0,1,2}; min-p 0.55 -> drops p < 0.55 * p0: keeps {0, 1}.
  auto p = Sampler(sampling(1.0f, 4, 0.7f, 0.55f), 0).probabilities(l);
  EXPECT_EQ(support(p), (std::vector<int>{0, 1}));
  EXPECT_NEAR(p[0], 0.4 / 0.65, 1e-6);
}

TEST(Sampler, SeededStreamsAreReproducibleAndIndependent) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 1.3));
  auto draw = [&](uint64_t seed, uint64_t stream) {
    SamplingParams s = sampling(1.0f);
    s.seed = seed;
    Sampler smp(s, stream);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(smp.sample(l));
    return out;
  };
  EXPECT_EQ(draw(5, 0), draw(5, 0));
  EXPECT_NE(draw(5, 0), draw(6, 0));
  EXPECT_NE(draw(5, 0), draw(5, 1));
}

TEST(Sampler, DrawsFollowTheDistribution) {
  auto l = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplingParams s = sampling(1.0f);
  s.seed = 11;
  Sampler smp(s, 0);
  std::vector<int> count(4);
  const int n = 40000;
  for (int i = 0; i < n; ++i) count[smp.sample(l)]++;
  const double expect[] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) {
    const double sd = std::sqrt(expect[i] * (1 - expect[i]) / n);
    EXPECT_NEAR(count[i] / static_cast<double>(n), expect[i], 5 * sd) << "token " << i;
  }
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(validate(sampling(1.0f, 0, 0.0f)), Error);
  EXPECT_THROW(validate(sampling(1.0f, 0, 1.5f)), Error);
  EXPECT_THROW(validate(sampling(1.0f, 0, 1.0f, -0.1f)), Error);
  EXPECT_THROW(validate(sampling(NAN)), Error);
  SamplingParams s;
  s.stop = {""};
  EXPECT_THROW(validate(s), Error);
  s = SamplingParams{};
  s.max_tokens = -1;
  EXPECT_THROW(validate(s), Error);
  EXPECT_THROW(Sampler(sampling(1.0f), 0).sample(std::vector<float>{}), Error);
}

// ---- stop strings ----

std::string feed(StopStringMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.emit;
    if (r.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out + m.flush();
}

TEST(StopStrings, CutBeforeTheMatchAcrossPieces) {
  StopStringMatcher m({"world"});
  bool stopped;
  EXPECT_EQ(feed(m, {"Hello wo", "r", "ld and more"}, &stopped), "Hello ");
  EXPECT_TRUE(stopped);
}

// vLLM's include_stop_str_in_output: the text ends after the match, the whole of it (the
// longest stop string where several match at one position).
TEST(StopStrings, IncludeTheMatch) {
  StopStringMatcher m({"world"}, /*include_match=*/true);
  bool stopped;
  EXPECT_EQ(feed(m, {"Hello wo", "r", "ld and more"}, &stopped), "Hello world");
  EXPECT_TRUE(stopped);
  StopStringMatcher two({"ab", "abc", "x"}, true);
  EXPECT_EQ(feed(two, {"zzabcx"}, &stopped), "zzabc");
  EXPECT_TRUE(stopped);
  StopStringMatcher cut({"ab", "abc", "x"});
  EXPECT_EQ(feed(cut, {"zzabcx"}, &stopped), "zz");
}

TEST(StopStrings, HoldBackOnlyWhatCouldStartAStop) {
  StopStringMatcher m({"STOP", "\n\n"});
  auto r = m.push("abc ST");
  EXPECT_EQ(r.emit, "abc ");  // "ST" might begin "STOP"
  EXPECT_FALSE(r.stopped);
  r = m.push("AR\n");
  EXPECT_EQ(r.emit, "STAR");  // "\n" might begin "\n\n"
  r = m.push("x");
  EXPECT_EQ(r.emit, "\nx");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, EarliestMatchWinsAndFlushReturnsHeldText) {
  StopStringMatcher m({"cd", "bcx"});
  bool stopped;
  EXPECT_EQ(feed(m, {"abcd"}, &stopped), "ab");
  EXPECT_TRUE(stopped);
  StopStringMatcher m2({"xyz"});
  EXPECT_EQ(feed(m2, {"abc", "xy"}, &stopped), "abcxy");
  EXPECT_FALSE(stopped);
  StopStringMatcher none({});
  EXPECT_EQ(none.push("anything").emit, "anything");
}

}  // namespace
}  // namespace kvattn
