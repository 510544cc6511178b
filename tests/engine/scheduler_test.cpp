// The Scheduler's policies on scripted scenarios (no model): the token budget, chunked
// prefill across steps, decode rows mixed with prefill chunks, preemption youngest-first and
// re-admission, strict FCFS, max_num_seqs and fork slots; then a randomized simulation of the
// engine's protocol checking the same invariants every step and that no block leaks.
#include "engine/llm/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

// Random prompt tokens: distinct content per sequence, so prefix hits are only the ones a
// test builds on purpose.
std::vector<int32_t> tokens(std::mt19937_64& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> d(0, 30000);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

struct Fixture {
  Fixture(int64_t num_blocks, int64_t block_size, SchedulerOptions o)
      : blocks(num_blocks, block_size), sched(blocks, o) {}
  Sequence& add(int64_t prompt_len, int64_t samples = 1, int64_t max_chunk = 0) {
    seqs.push_back(std::make_unique<Sequence>(next_id++, tokens(rng, prompt_len)));
    sched.add(*seqs.back(), samples, max_chunk);
    return *seqs.back();
  }
  // complete_step, then every sequence that computed its last token "samples" one.
  void complete_and_sample() {
    std::vector<Sequence*> done;
    for (size_t i = 0; i < sched_step->batch.size(); ++i) {
      if (sched_step->completes(i)) done.push_back(sched_step->seqs[i]);
    }
    sched.complete_step();
    for (Sequence* s : done) s->append_token(7);
  }
  const SchedulerStep& step() {
    sched_step = &sched.schedule();
    return *sched_step;
  }

  std::mt19937_64 rng{std::random_device{}()};
  BlockManager blocks;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  SeqId next_id = 0;
  const SchedulerStep* sched_step = nullptr;
};

int64_t total_tokens(const SchedulerStep& st) {
  int64_t n = 0;
  for (const auto& r : st.batch) n += r.num_new_tokens;
  return n;
}

TEST(Scheduler, ChunksALongPromptUnderTheBudget) {
  Fixture f(64, 16, {.max_num_seqs = 8, .max_num_batched_tokens = 10});
  Sequence& a = f.add(25);
  for (int64_t expect : {10, 10, 5}) {
    const SchedulerStep& st = f.step();
    ASSERT_EQ(st.batch.size(), 1u);
    EXPECT_EQ(st.batch[0].seq, &a);
    EXPECT_EQ(st.batch[0].num_new_tokens, expect);
    EXPECT_EQ(st.num_decode_rows, 0);
    EXPECT_EQ(st.num_prefill_tokens, expect);
    EXPECT_EQ(st.completes(0), expect == 5);
    f.complete_and_sample();
  }
  EXPECT_EQ(a.num_computed_tokens(), 25);
  const SchedulerStep& st = f.step();  // now a decode row
  ASSERT_EQ(st.batch.size(), 1u);
  EXPECT_EQ(st.num_decode_rows, 1);
  EXPECT_EQ(st.batch[0].num_new_tokens, 1);
  EXPECT_TRUE(st.completes(0));
}

// Scheduler::add's max_chunk caps a prefill's chunk below the budget (prompt log-probabilities:
// each prompt row's logits cross to the host); the budget left goes to the next prompt.
TEST(Scheduler, MaxChunkCapsAPrefillBelowTheBudget) {
  Fixture f(64, 16, {.max_num_seqs = 8, .max_num_batched_tokens = 10});
  Sequence& a = f.add(9, 1, /*max_chunk=*/4);
  Sequence& b = f.add(3);
  const SchedulerStep& st = f.step();
  ASSERT_EQ(st.batch.size(), 2u);
  EXPECT_EQ(st.batch[0].seq, &a);
  EXPECT_EQ(st.batch[0].num_new_tokens, 4);
  EXPECT_EQ(st.batch[1].seq, &b);
  EXPECT_EQ(st.batch[1].num_new_tokens, 3);
  f.complete_and_sample();
  for (int64_t expect : {4, 1}) {
    const SchedulerStep& s2 = f.step();
    ASSERT_GE(s2.batch.size(), 1u);
    const auto it = std::find_if(s2.batch.begin(), s2.batch.end(),
                                 [&](const ScheduledSequence& r) { return r.seq == &a; });
    ASSERT_NE(it, s2.batch.end());
    EXPECT_EQ(it->num_new_tokens, expect);
    f.complete_and_sample();
  }
  EXPECT_EQ(a.num_computed_tokens(), 9);
  EXPECT_THROW(f.sched.add(*f.seqs.front(), 1, -1), Error);
}

TEST(Scheduler, DecodeRowsComeFirstThenPrefillChunksFillTheBudget) {
  Fixture f(64, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 12});
  Sequence& a = f.add(5);
  Sequence& b = f.add(3);
  f.step();
  f.complete_and_sample();  // both prefilled (8 tokens), one token each sampled
  Sequence& c = f.add(40);
  Sequence& d = f.add(9);
  const SchedulerStep& st = f.step();
  ASSERT_EQ(st.batch.size(), 3u);
  EXPECT_EQ(st.num_decode_rows, 2);
  EXPECT_EQ(st.batch[0].seq, &a);
  EXPECT_EQ(st.batch[1].seq, &b);
  EXPECT_EQ(st.batch[2].seq, &c);
  EXPECT_EQ(st.batch[2].num_new_tokens, 10);  // 12 - 2 decode rows
  EXPECT_FALSE(st.completes(2));
  EXPECT_EQ(total_tokens(st), 12);
  EXPECT_EQ(st.admitted, (std::vector<Sequence*>{&c}));
  f.complete_and_sample();
  // c's second chunk comes before any admission: d keeps waiting while the budget is spent.
  const SchedulerStep& st2 = f.step();
  ASSERT_EQ(st2.batch.size(), 3u);
  EXPECT_EQ(st2.num_decode_rows, 2);
  EXPECT_EQ(st2.batch[2].seq, &c);
  EXPECT_EQ(st2.batch[2].num_new_tokens, 10);
  EXPECT_EQ(total_tokens(st2), 12);
  EXPECT_TRUE(st2.admitted.empty());
  EXPECT_EQ(f.sched.waiting(), (std::vector<const Sequence*>{&d}));
}

TEST(Scheduler, PreemptsTheYoungestAndReadmitsItFirst) {
  // 6 blocks of 4: three 7-token prompts take 2 blocks each.
  Fixture f(6, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 64});
  Sequence& a = f.add(7);
  Sequence& b = f.add(7);
  Sequence& c = f.add(7);
  Sequence& d = f.add(3);  // waits: no block left
  const SchedulerStep& st0 = f.step();
  EXPECT_EQ(st0.admitted, (std::vector<Sequence*>{&a, &b, &c}));
  f.complete_and_sample();  // 8 tokens each: still 2 blocks
  f.step();
  f.complete_and_sample();  // 9 tokens each: every row needs a third block
  const SchedulerStep& st = f.step();
  // a takes c's first freed block... c (youngest) goes; b then needs a block: c's second.
  EXPECT_EQ(st.preempted, (std::vector<Sequence*>{&c}));
  ASSERT_EQ(st.batch.size(), 2u);
  EXPECT_EQ(st.batch[0].seq, &a);
  EXPECT_EQ(st.batch[1].seq, &b);
  EXPECT_TRUE(st.admitted.empty());  // a step that preempted admits nothing
  EXPECT_EQ(f.sched.waiting(), (std::vector<const Sequence*>{&c, &d}));
  EXPECT_FALSE(c.is_allocated());
  EXPECT_EQ(c.num_tokens(), 9);  // keeps its tokens: they are recomputed
  EXPECT_EQ(f.sched.num_preemptions(), 1);
  f.complete_and_sample();

  // a finishes: its blocks return, and c comes back before d, recomputing what the prefix
  // cache no longer holds.
  f.sched.finish(a);
  const SchedulerStep& st2 = f.step();
  EXPECT_EQ(st2.admitted, (std::vector<Sequence*>{&c}));  // d: no block left after c
  ASSERT_EQ(st2.seqs.size(), 2u);
  EXPECT_EQ(st2.seqs[1], &c);
  EXPECT_EQ(st2.batch[1].num_new_tokens, 9 - c.num_cached_tokens());
  EXPECT_TRUE(st2.completes(1));
  f.complete_and_sample();
  f.blocks.check_invariants();
}

TEST(Scheduler, FcfsHeadOfLineIsNotOvertakenBySmallerLaterRequests) {
  Fixture f(8, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 256});
  Sequence& a = f.add(20);  // 5 blocks
  f.step();
  f.complete_and_sample();
  Sequence& big = f.add(16);   // 4 blocks: does not fit next to a (3 free)
  Sequence& small = f.add(2);  // 1 block: would fit, but must not jump the queue
  for (int i = 0; i < 2; ++i) {
    const SchedulerStep& st = f.step();
    EXPECT_TRUE(st.admitted.empty());
    EXPECT_EQ(f.sched.waiting(), (std::vector<const Sequence*>{&big, &small}));
    f.complete_and_sample();
  }
  f.sched.finish(a);
  const SchedulerStep& st = f.step();
  EXPECT_EQ(st.admitted, (std::vector<Sequence*>{&big, &small}));
}

TEST(Scheduler, RunsAtMostMaxNumSeqsAndReservesSlotsForSamples) {
  Fixture f(256, 4, {.max_num_seqs = 4, .max_num_batched_tokens = 1000});
  Sequence& a = f.add(5);
  Sequence& b = f.add(5, /*samples=*/3);  // 1 + 3 slots: fits exactly
  Sequence& c = f.add(5);
  const SchedulerStep& st = f.step();
  EXPECT_EQ(st.admitted, (std::vector<Sequence*>{&a, &b}));
  EXPECT_EQ(f.sched.num_reserved_slots(), 4);
  EXPECT_EQ(f.sched.waiting(), (std::vector<const Sequence*>{&c}));
  f.complete_and_sample();
  f.sched.finish(a);
  const SchedulerStep& st2 = f.step();
  EXPECT_EQ(st2.admitted, (std::vector<Sequence*>{&c}));
  EXPECT_EQ(f.sched.num_running(), 2);
  EXPECT_EQ(f.sched.num_reserved_slots(), 4);
}

TEST(Scheduler, ForkedChildrenRunRightAfterTheirParent) {
  Fixture f(256, 4, {.max_num_seqs = 6, .max_num_batched_tokens = 1000});
  Sequence& p = f.add(6, 3);
  Sequence& q = f.add(5);
  f.step();
  // The engine forks after the prefill, before appending the sampled tokens.
  f.sched.complete_step();
  std::vector<BlockCopy> copies;
  Sequence c1 = f.blocks.fork(p, 100, copies);
  Sequence c2(101, std::vector<int32_t>(p.token_ids().begin(), p.token_ids().end()));
  f.sched.add_fork(p, c1);
  f.sched.add_fork(p, c2);  // holds no blocks: waits in front
  EXPECT_EQ(copies.size(), 1u);  // 6 tokens: the half-full second block is copied
  EXPECT_EQ(f.sched.running(), (std::vector<const Sequence*>{&p, &c1, &q}));
  EXPECT_EQ(f.sched.waiting(), (std::vector<const Sequence*>{&c2}));
  EXPECT_EQ(f.sched.num_reserved_slots(), 3);  // c2's slot is released until it is admitted
  EXPECT_THROW(f.sched.add_fork(p, c2), Error);  // p has no slot left
  for (Sequence* s : {&p, &c1, &c2, &q}) s->append_token(3);
  const SchedulerStep& st = f.step();
  EXPECT_EQ(st.num_decode_rows, 3);
  EXPECT_EQ(st.seqs[0], &p);
  EXPECT_EQ(st.seqs[1], &c1);
  EXPECT_EQ(st.seqs[2], &q);
  EXPECT_EQ(st.admitted, (std::vector<Sequence*>{&c2}));
  f.sched.complete_step();
  EXPECT_THROW(f.sched.add_fork(q, c2), Error);  // q reserved a single slot
  f.sched.abort_all();
  EXPECT_FALSE(f.sched.has_unfinished());
  EXPECT_EQ(f.blocks.num_free_blocks(), 256);
  f.blocks.check_invariants();
}

TEST(Scheduler, AbortsASequenceThatCannotFitAlone) {
  Fixture f(2, 4, {.max_num_seqs = 4, .max_num_batched_tokens = 64});
  Sequence& a = f.add(7);
  f.step();
  f.complete_and_sample();  // 8 tokens: 2 blocks, the whole pool
  f.step();
  f.complete_and_sample();  // 9 tokens: a third block is needed and none will come
  const SchedulerStep& st = f.step();
  EXPECT_EQ(st.aborted, (std::vector<Sequence*>{&a}));
  EXPECT_TRUE(st.batch.empty());
  EXPECT_FALSE(a.is_allocated());
  f.sched.complete_step();
  EXPECT_FALSE(f.sched.has_unfinished());
  EXPECT_EQ(f.blocks.num_free_blocks(), 2);
}

TEST(Scheduler, ProtocolErrorsThrow) {
  Fixture f(16, 4, {.max_num_seqs = 4, .max_num_batched_tokens = 64});
  Sequence& a = f.add(5);
  EXPECT_THROW(f.sched.complete_step(), Error);  // no step open
  f.step();
  EXPECT_THROW(f.sched.schedule(), Error);  // not completed
  EXPECT_THROW(f.sched.finish(a), Error);   // during a step
  f.sched.complete_step();
  EXPECT_THROW(f.sched.schedule(), Error);  // a's sampled token was never appended
  f.sched.abort_all();
  EXPECT_THROW(f.add(3, 5), Error);         // more samples than max_num_seqs
  EXPECT_THROW(Scheduler(f.blocks, {.max_num_seqs = 0}), Error);
  EXPECT_THROW(Scheduler(f.blocks, {.max_num_batched_tokens = 0}), Error);
  Sequence held(99, {1, 2, 3});
  f.blocks.allocate(held);
  EXPECT_THROW(f.sched.add(held), Error);  // must hold no blocks
  f.blocks.free(held);
}

// The engine's protocol on random workloads and pool sizes: every step respects the budget,
// max_num_seqs and the row order; first admissions follow arrival order; every sequence gets
// exactly its tokens; nothing leaks.
TEST(Scheduler, RandomWorkloadsKeepEveryInvariant) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t bs = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const int64_t max_len = 40;
    const int64_t num_blocks =
        std::uniform_int_distribution<int64_t>((max_len + 8) / bs + 1, 4 * max_len / bs + 2)(rng);
    const SchedulerOptions o{std::uniform_int_distribution<int64_t>(1, 6)(rng),
                             std::uniform_int_distribution<int64_t>(1, 48)(rng)};
    Fixture f(num_blocks, bs, o);
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<int64_t> want(n);  // tokens to generate
    for (int i = 0; i < n; ++i) {
      f.add(std::uniform_int_distribution<int64_t>(1, 32)(rng));
      want[i] = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    }
    std::vector<SeqId> first_admission;
    int64_t steps = 0;
    while (f.sched.has_unfinished()) {
      ASSERT_LT(++steps, 10000) << "no progress";
      const SchedulerStep& st = f.step();
      ASSERT_TRUE(st.aborted.empty()) << "pool fits every sequence alone";
      EXPECT_LE(total_tokens(st), o.max_num_batched_tokens);
      EXPECT_LE(f.sched.num_running(), o.max_num_seqs);
      for (Sequence* s : st.admitted) {
        if (s->num_completion_tokens() == 0 &&
            std::find(first_admission.begin(), first_admission.end(), s->id()) ==
                first_admission.end()) {
          first_admission.push_back(s->id());
        }
      }
      for (int64_t i = 0; i < st.num_decode_rows; ++i) EXPECT_EQ(st.batch[i].num_new_tokens, 1);
      std::vector<Sequence*> done;
      for (size_t i = 0; i < st.batch.size(); ++i) {
        if (st.completes(i)) done.push_back(st.seqs[i]);
      }
      f.sched.complete_step();
      f.blocks.check_invariants();
      for (Sequence* s : done) {
        s->append_token(static_cast<int32_t>(s->num_tokens()));
        if (s->num_completion_tokens() == want[s->id()]) f.sched.finish(*s);
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(f.seqs[i]->num_completion_tokens(), want[i]);
    std::vector<SeqId> order(first_admission);
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "FCFS broken";
    EXPECT_EQ(f.blocks.num_free_blocks(), num_blocks);
    EXPECT_EQ(f.blocks.stats().num_sequences, 0);
  }
}

}  // namespace
}  // namespace kvattn
