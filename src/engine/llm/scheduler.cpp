#include "engine/llm/scheduler.h"

#include <algorithm>

#include "kvattn/core/error.h"

namespace kvattn {

Scheduler::Scheduler(BlockManager& blocks, const SchedulerOptions& options)
    : blocks_(blocks), options_(options) {
  KVATTN_CHECK(options.max_num_seqs >= 1, "Scheduler: max_num_seqs must be >= 1 but is ",
               options.max_num_seqs);
  KVATTN_CHECK(options.max_num_batched_tokens >= 1,
               "Scheduler: max_num_batched_tokens must be >= 1 but is ",
               options.max_num_batched_tokens);
}

void Scheduler::add(Sequence& seq, int64_t num_samples, int64_t max_chunk) {
  KVATTN_CHECK(!seq.is_allocated(), "Scheduler::add: sequence ", seq.id(),
               " must hold no blocks but holds ", seq.num_blocks());
  KVATTN_CHECK(num_samples >= 1 && num_samples <= options_.max_num_seqs,
               "Scheduler::add: num_samples of sequence ", seq.id(), " must be in [1, ",
               options_.max_num_seqs, "] (max_num_seqs) but is ", num_samples);
  KVATTN_CHECK(max_chunk >= 0, "Scheduler::add: max_chunk of sequence ", seq.id(),
               " must be >= 0 but is ", max_chunk);
  seq.set_status(SequenceStatus::kWaiting);
  waiting_.push_back({&seq, num_samples, false, 0, max_chunk});
}

size_t Scheduler::find_running(const Sequence& seq) const {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i].seq == &seq) return i;
  }
  return running_.size();
}

const SchedulerStep& Scheduler::schedule() {
  KVATTN_CHECK(!step_open_,
               "Scheduler::schedule: the previous step is not completed (call complete_step)");
  for (const Entry& e : running_) {
    KVATTN_CHECK(e.seq->num_uncomputed_tokens() >= 1, "Scheduler::schedule: running sequence ",
                 e.seq->id(), " has no token to compute (append its sampled token or finish it)");
  }
  step_.batch.clear();
  step_.seqs.clear();
  step_.admitted.clear();
  step_.preempted.clear();
  step_.aborted.clear();
  step_.num_decode_rows = 0;
  step_.num_prefill_tokens = 0;
  row_entry_.clear();
  budget_ = options_.max_num_batched_tokens;
  step_open_ = true;

  // 1. Decode rows, oldest first. Preemption only removes entries younger than row i.
  for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    if (running_[i].prefilling) continue;
    if (!reserve_blocks(i)) break;  // row i was the youngest and is gone
    schedule_row(i, std::min(running_[i].seq->num_uncomputed_tokens(), budget_));
  }
  // 2. Chunks of prefills already running (their blocks were allocated at admission).
  for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    if (running_[i].prefilling) schedule_row(i, running_[i].chunk(budget_));
  }
  // 3. Admission (vLLM: none in a step that had to preempt).
  if (step_.preempted.empty()) admit_waiting();
  return step_;
}

bool Scheduler::reserve_blocks(size_t i) {
  Sequence& s = *running_[i].seq;
  while (!blocks_.can_append(s)) {
    if (running_.size() == 1) {  // nobody else holds a block: it can never grow
      blocks_.free(s);
      s.set_status(SequenceStatus::kFinished);
      step_.aborted.push_back(&s);
      reserved_ -= running_.back().slots;
      running_.pop_back();
      return false;
    }
    const bool self = i + 1 == running_.size();
    preempt_youngest();
    if (self) return false;
  }
  blocks_.append(s);
  return true;
}

void Scheduler::preempt_youngest() {
  Entry e = running_.back();
  running_.pop_back();
  reserved_ -= e.slots;
  blocks_.free(*e.seq);
  e.seq->set_status(SequenceStatus::kWaiting);
  e.prefilling = false;
  e.forks = 0;
  waiting_.push_front(e);
  step_.preempted.push_back(e.seq);
  ++num_preemptions_;
}

void Scheduler::schedule_row(size_t i, int64_t n) {
  Entry& e = running_[i];
  step_.batch.push_back({e.seq, n});
  step_.seqs.push_back(e.seq);
  row_entry_.push_back(i);
  if (e.prefilling) {
    step_.num_prefill_tokens += n;
  } else {
    ++step_.num_decode_rows;
  }
  budget_ -= n;
}

void Scheduler::admit_waiting() {
  while (!waiting_.empty() && budget_ > 0) {
    Entry e = waiting_.front();
    if (reserved_ + e.slots > options_.max_num_seqs) break;
    if (!blocks_.can_allocate(*e.seq)) {
      if (!running_.empty()) break;  // strict FCFS: wait for blocks to come back
      waiting_.pop_front();          // the pool is all free and still too small
      e.seq->set_status(SequenceStatus::kFinished);
      step_.aborted.push_back(e.seq);
      continue;
    }
    waiting_.pop_front();
    blocks_.allocate(*e.seq);
    e.seq->set_status(SequenceStatus::kRunning);
    e.prefilling = true;
    running_.push_back(e);
    reserved_ += e.slots;
    step_.admitted.push_back(e.seq);
    schedule_row(running_.size() - 1, running_.back().chunk(budget_));
  }
}

void Scheduler::complete_step() {
  KVATTN_CHECK(step_open_, "Scheduler::complete_step: no step is open (call schedule first)");
  for (size_t r = 0; r < step_.batch.size(); ++r) {
    Entry& e = running_[row_entry_[r]];
    blocks_.mark_computed(*e.seq, step_.batch[r].num_new_tokens);
    if (e.seq->num_uncomputed_tokens() == 0) e.prefilling = false;
  }
  step_open_ = false;
}

void Scheduler::add_fork(const Sequence& parent, Sequence& child) {
  KVATTN_CHECK(!step_open_, "Scheduler::add_fork: a step is open (call complete_step first)");
  const size_t p = find_running(parent);
  KVATTN_CHECK(p < running_.size(), "Scheduler::add_fork: parent sequence ", parent.id(),
               " is not running");
  KVATTN_CHECK(running_[p].slots > 1, "Scheduler::add_fork: parent sequence ", parent.id(),
               " has no slot reserved for another sample (reserved ", running_[p].slots, ")");
  KVATTN_CHECK(!child.is_allocated() || child.owner() == &blocks_,
               "Scheduler::add_fork: child sequence ", child.id(),
               " holds blocks of another manager");
  --running_[p].slots;
  if (child.is_allocated()) {
    child.set_status(SequenceStatus::kRunning);
    const size_t at = p + 1 + running_[p].forks++;
    running_.insert(running_.begin() + static_cast<std::ptrdiff_t>(at), Entry{&child, 1, false});
  } else {
    child.set_status(SequenceStatus::kWaiting);
    waiting_.push_front(Entry{&child, 1, false});
    --reserved_;
  }
}

void Scheduler::finish(Sequence& seq) {
  KVATTN_CHECK(!step_open_, "Scheduler::finish: a step is open (call complete_step first)");
  const size_t i = find_running(seq);
  if (i < running_.size()) {
    blocks_.free(seq);
    reserved_ -= running_[i].slots;
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  } else {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [&](const Entry& e) { return e.seq == &seq; });
    KVATTN_CHECK(it != waiting_.end(), "Scheduler::finish: sequence ", seq.id(),
                 " is neither running nor waiting");
    waiting_.erase(it);
  }
  seq.set_status(SequenceStatus::kFinished);
}

void Scheduler::abort_all() {
  for (Entry& e : running_) {
    if (e.seq->is_allocated()) blocks_.free(*e.seq);
    e.seq->set_status(SequenceStatus::kFinished);
  }
  for (Entry& e : waiting_) e.seq->set_status(SequenceStatus::kFinished);
  running_.clear();
  waiting_.clear();
  reserved_ = 0;
  step_open_ = false;
}

std::vector<const Sequence*> Scheduler::running() const {
  std::vector<const Sequence*> v;
  for (const Entry& e : running_) v.push_back(e.seq);
  return v;
}

std::vector<const Sequence*> Scheduler::waiting() const {
  std::vector<const Sequence*> v;
  for (const Entry& e : waiting_) v.push_back(e.seq);
  return v;
}

}  // namespace kvattn
