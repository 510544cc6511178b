#include "kvattn/cache/sequence.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

TEST(Sequence, TracksPromptAndCompletion) {
  Sequence s(7, {5, 6, 7});
  EXPECT_EQ(s.id(), 7);
  EXPECT_EQ(s.status(), SequenceStatus::kWaiting);
  EXPECT_EQ(s.num_tokens(), 3);
  EXPECT_EQ(s.num_prompt_tokens(), 3);
  EXPECT_EQ(s.num_completion_tokens(), 0);
  s.append_token(9);
  s.append_tokens(std::vector<int32_t>{10, 11});
  EXPECT_EQ(s.num_tokens(), 6);
  EXPECT_EQ(s.last_token(), 11);
  EXPECT_EQ(std::vector<int32_t>(s.prompt_token_ids().begin(), s.prompt_token_ids().end()),
            (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(std::vector<int32_t>(s.completion_token_ids().begin(),
                                 s.completion_token_ids().end()),
            (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(s.num_uncomputed_tokens(), 6);
  EXPECT_FALSE(s.is_allocated());
  s.set_status(SequenceStatus::kRunning);
  EXPECT_EQ(s.status(), SequenceStatus::kRunning);
}

TEST(Sequence, RejectsBadTokensWithoutChange) {
  Sequence s(1, {1});
  EXPECT_THROW(s.append_tokens(std::vector<int32_t>{2, -3}), Error);
  EXPECT_EQ(s.num_tokens(), 1);
  try {
    Sequence bad(4, {0, 1, -5});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_token_ids[2] of sequence 4 must be >= 0 but is -5"),
              std::string::npos)
        << e.what();
  }
}

TEST(Sequence, MoveLeavesAnEmptySource) {
  Sequence a(3, {1, 2});
  Sequence b = std::move(a);
  EXPECT_EQ(b.num_tokens(), 2);
  EXPECT_EQ(a.num_tokens(), 0);  // NOLINT(bugprone-use-after-move): the documented state
  EXPECT_EQ(a.num_prompt_tokens(), 0);
}

}  // namespace
}  // namespace kvattn
