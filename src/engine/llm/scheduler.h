// Scheduler: decides what one engine step computes (vLLM v1's policy, host only).
//
// Queues: `waiting` (FIFO, holds no blocks) and `running` (in admission order, holds blocks).
// One schedule() spends a budget of max_num_batched_tokens query tokens:
//  1. decode rows: every running sequence that has finished its prefill gets one token, oldest
//     first; each needs a block for its new token (BlockManager::append);
//  2. prefill chunks: running sequences still prefilling get min(uncomputed, budget left);
//  3. admission: the head of `waiting` is allocated (prefix-cache hit first) and given a chunk,
//     while budget, max_num_seqs and free blocks allow. Strict FCFS: when the head does not
//     fit, nothing behind it is admitted, so a request is never starved by later arrivals.
// Preemption by recompute: when a decode row finds no free block, the youngest running
// sequence (the most recently admitted; possibly the row itself) is freed and put at the front
// of `waiting`; it is re-admitted later and recomputes its tokens (through the prefix cache).
// A step that preempted admits nothing. A sequence that cannot fit even alone (its tokens
// outgrew the pool) is aborted: freed and reported in SchedulerStep::aborted.
//
// Parallel samples: add(seq, n) reserves n of the max_num_seqs slots at admission; after the
// prefill, add_fork() turns one slot into a forked child (running right after its parent), or
// into a waiting child when the pool had no block for the fork.
//
// Protocol per step: schedule(), run the model on SchedulerStep::batch, complete_step()
// (marks the KV computed), then append each sampled token to its sequence or finish() it.
// Not thread-safe. Sequences must stay at the same address while the scheduler knows them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/sequence.h"

namespace kvattn {

struct SchedulerOptions {
  int64_t max_num_seqs = 64;              // running sequences (samples) at most
  int64_t max_num_batched_tokens = 2048;  // query tokens per step
};

struct SchedulerStep {
  // Rows for BatchMetadataBuilder: the first num_decode_rows are decode rows (one token each),
  // then prefill chunks. seqs[i] is batch[i].seq, writable.
  std::vector<ScheduledSequence> batch;
  std::vector<Sequence*> seqs;
  int64_t num_decode_rows = 0;
  int64_t num_prefill_tokens = 0;   // tokens of the prefill rows
  std::vector<Sequence*> admitted;   // allocated this step (in batch)
  std::vector<Sequence*> preempted;  // freed and re-queued this step, youngest first
  std::vector<Sequence*> aborted;    // freed and dropped: they can never fit in the pool
  // Row i computes its sequence's last token: the step yields that sequence's next token.
  bool completes(size_t i) const {
    return batch[i].seq->num_computed_tokens() + batch[i].num_new_tokens ==
           batch[i].seq->num_tokens();
  }
};

class Scheduler {
 public:
  // blocks must outlive the scheduler. Both options must be >= 1.
  Scheduler(BlockManager& blocks, const SchedulerOptions& options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A new sequence at the back of `waiting`. It must hold no blocks; num_samples (in
  // [1, max_num_seqs]) slots are reserved for it and its future forks. max_chunk > 0: its
  // prefill computes at most that many tokens a step (0: as the step's budget allows).
  void add(Sequence& seq, int64_t num_samples = 1, int64_t max_chunk = 0);

  // Plans one step (see the file comment). The result is valid until the next schedule().
  // Throws when the previous step was not completed or a running sequence has no token to
  // compute (its sampled token was neither appended nor the sequence finished).
  const SchedulerStep& schedule();

  // After the model ran the last schedule(): marks each row's tokens computed.
  void complete_step();

  // Adds a child of `parent` (running, reserved more than one slot): a child held by the
  // manager (BlockManager::fork) runs right after its parent; one holding no blocks waits at
  // the front of `waiting`. The parent's reservation shrinks by one.
  void add_fork(const Sequence& parent, Sequence& child);

  // Drops a running or waiting sequence, releasing its blocks (finished or aborted).
  void finish(Sequence& seq);

  // Drops every sequence, releasing all blocks (error recovery). Ends an open step.
  void abort_all();

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_reserved_slots() const { return reserved_; }
  std::vector<const Sequence*> running() const;  // admission order
  std::vector<const Sequence*> waiting() const;  // queue order
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Entry {
    Sequence* seq = nullptr;
    int64_t slots = 1;        // max_num_seqs slots it holds (n before its forks, then 1)
    bool prefilling = false;  // admitted, and this admission's first token not computed yet
    int64_t forks = 0;        // forked children placed right after it in running_
    int64_t max_chunk = 0;    // add's max_chunk (0: none)
    int64_t chunk(int64_t budget) const {
      const int64_t n = std::min(seq->num_uncomputed_tokens(), budget);
      return max_chunk > 0 ? std::min(n, max_chunk) : n;
    }
  };

  // Blocks for the tokens of running_[i] (decode), preempting the youngest as needed. False
  // when running_[i] itself was preempted or aborted.
  bool reserve_blocks(size_t i);
  void preempt_youngest();
  void schedule_row(size_t running_index, int64_t n);
  void admit_waiting();
  size_t find_running(const Sequence& seq) const;  // running_.size() when absent

  BlockManager& blocks_;
  SchedulerOptions options_;
  std::deque<Entry> waiting_;
  std::vector<Entry> running_;
  int64_t reserved_ = 0;  // slots of running_
  int64_t budget_ = 0;    // tokens left in the step being planned
  bool step_open_ = false;
  std::vector<size_t> row_entry_;  // running_ index of each row of the open step
  SchedulerStep step_;
  int64_t num_preemptions_ = 0;
};

}  // namespace kvattn
