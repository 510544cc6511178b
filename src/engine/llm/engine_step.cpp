// LLMEngine's step loop (see engine.h for the order of one step).
#include <chrono>
#include <span>

#include "engine/llm/engine.h"
#include "kvattn/core/error.h"

namespace kvattn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void LLMEngine::run_step(const TokenCallback& cb) {
  const auto t0 = Clock::now();
  std::vector<Sample*> ending;
  ending.swap(ending_);
  for (Sample* s : ending) deliver(*s, end_sample(*s), cb);

  const SchedulerStep& st = scheduler_->schedule();
  for (Sequence* q : st.aborted) {  // outgrew the pool: ends with what it has
    Sample& s = *by_seq_.at(q->id());
    s.in_scheduler = false;
    Request& r = s.req;
    // An unforked prompt's other samples never ran: they end with it. Collect them first,
    // since the last deliver() destroys r.
    std::vector<Sample*> unforked;
    if (s.index == 0 && !r.forked) {
      for (size_t j = 1; j < r.samples.size(); ++j) unforked.push_back(r.samples[j].get());
    }
    deliver(s, end_sample(s), cb);
    for (Sample* c : unforked) deliver(*c, end_sample(*c), cb);
  }
  for (Sequence* q : st.admitted) {
    Sample& s = *by_seq_.at(q->id());
    if (s.index == 0 && !s.req.admitted_once) {
      s.req.admitted_once = true;
      s.req.num_cached_tokens = q->num_cached_tokens();
      stats_.num_cached_tokens += q->num_cached_tokens();
    }
  }
  stats_.num_preemptions += static_cast<int64_t>(st.preempted.size());
  if (st.batch.empty()) {
    scheduler_->complete_step();
    const double dt = seconds_since(t0);
    stats_.host_seconds += dt;
    account_step(/*prefill=*/false, dt, 0.0, /*counted=*/false);
    return;
  }

  int64_t attended = 0;  // before the step: the sequences' lengths at its end
  for (const ScheduledSequence& s : st.batch)
    attended += s.seq->num_computed_tokens() + s.num_new_tokens;
  const BatchMetadata& meta = builder_->build(st.batch, build_options_);
  if (meta.ctx.cascade_prefix_len > 0) ++stats_.num_cascade_steps;
  BatchContext ctx = meta.ctx;
  ctx.decode_plan = DecodePlan{1, 0};
  plan_rows(st);
  ModelInput in;
  in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.logit_rows = logit_rows_;
  in.ctx = &ctx;
  const double model_seconds = sample_rows(in);
  scheduler_->complete_step();

  copies_.clear();
  for (Request* r : fork_now_) fork_samples(*r);
  if (!copies_.empty()) model_->copy_kv_blocks(copies_);  // before the next forward
  const StopRules rules{eos_ids_, max_model_len_};
  for (size_t k = 0; k < targets_.size(); ++k) {
    const RowTarget& t = targets_[k];
    if (t.end_request) {  // max_tokens == 0: the prompt ran for its log-probabilities
      Request& r = t.sample->req;
      // Sample 0 last: the delivery that ends the last sample destroys the request.
      for (size_t j = r.samples.size(); j-- > 0;) {
        deliver(*r.samples[j], end_sample(*r.samples[j]), cb);
      }
      continue;
    }
    if (!t.draws()) continue;
    Sample& s = *t.sample;
    const TokenLogprobs* lp = s.req.params.logprobs >= 0 ? &logprobs_[k] : nullptr;
    deliver(s, accept_token(s, tokens_[k], rules, lp), cb);
  }

  const auto rows = static_cast<int64_t>(st.batch.size());
  const bool prefill = rows > st.num_decode_rows;
  const double dt = seconds_since(t0);
  ++stats_.num_steps;
  if (prefill && st.num_decode_rows > 0) ++stats_.num_mixed_steps;
  stats_.num_prefill_tokens += st.num_prefill_tokens;
  stats_.num_generated_tokens += num_drawn_;
  stats_.model_seconds += model_seconds;
  stats_.host_seconds += std::max(0.0, dt - model_seconds);
  account_step(prefill, dt, model_seconds, /*counted=*/true);
  (prefill ? stats_.prefill_steps : stats_.decode_steps).attended_keys += attended;
  if (prefill) {
    stats_.prefill_seconds += dt;
  } else {
    stats_.decode_seconds += dt;
    stats_.num_decode_tokens += num_drawn_;
  }
}

void LLMEngine::account_step(bool prefill, double seconds, double model_seconds, bool counted) {
  StepTimeSplit& split = prefill ? stats_.prefill_steps : stats_.decode_steps;
  split.steps += counted ? 1 : 0;
  split.model_seconds += model_seconds;
  split.host_seconds += std::max(0.0, seconds - model_seconds);
  stats_.phases_timed = phase_timing_;
  if (!phase_timing_ || !counted) return;
  // The model's clock runs inside the engine's: what it charged to no phase (the call's
  // overhead, device sampling outside forward) is "other".
  const PhaseTimes p = model_->last_phase_times();
  split.attention_seconds += p.attention_s;
  split.gemm_seconds += p.gemm_s;
  split.other_seconds += std::max(0.0, model_seconds - p.attention_s - p.gemm_s);
}

void LLMEngine::plan_rows(const SchedulerStep& st) {
  logit_rows_.clear();
  targets_.clear();
  fork_now_.clear();
  int64_t row = 0;
  for (size_t i = 0; i < st.batch.size(); ++i) {
    const int64_t n = st.batch[i].num_new_tokens;
    const int64_t first = row;
    const auto last = static_cast<int32_t>(row + n - 1);
    row += n;
    Sample& s = *by_seq_.at(st.seqs[i]->id());
    Request& r = s.req;
    // Prompt log-probabilities: the row at position p predicts prompt token p + 1.
    if (s.index == 0 && !r.forked && r.params.prompt_logprobs >= 0) {
      const int64_t c = st.seqs[i]->num_computed_tokens();
      for (int64_t p = c; p < std::min(c + n, r.num_prompt_tokens - 1); ++p) {
        logit_rows_.push_back(static_cast<int32_t>(first + p - c));
        targets_.push_back({&s, 0, p + 1});
      }
    }
    if (!st.completes(i)) {
      if (static_cast<int64_t>(i) >= st.num_decode_rows) ++stats_.num_partial_prefills;
      continue;
    }
    if (r.params.max_tokens == 0) {  // scheduled for its prompt log-probabilities only
      logit_rows_.push_back(last);
      targets_.push_back({&s, 0, 0, /*end_request=*/true});
    } else if (s.index == 0 && !r.forked && r.params.n > 1) {
      // The prompt's last row, once per sample: each sample draws its first token from it.
      for (auto& x : r.samples) {
        logit_rows_.push_back(last);
        targets_.push_back({x.get(), 0});
      }
      fork_now_.push_back(&r);
    } else {
      logit_rows_.push_back(last);
      targets_.push_back({&s, static_cast<uint64_t>(s.seq.num_completion_tokens())});
    }
  }
  num_drawn_ = std::count_if(targets_.begin(), targets_.end(),
                             [](const RowTarget& t) { return t.draws(); });
}

double LLMEngine::sample_rows(const ModelInput& in) {
  const size_t rows = logit_rows_.size();
  const auto vocab = static_cast<size_t>(config().vocab_size);
  tokens_.resize(rows);
  logprobs_.resize(rows);
  if (model_->samples_on_device()) {
    row_sampling_.resize(rows);
    copy_rows_.clear();
    for (size_t k = 0; k < rows; ++k) {
      const Sample& s = *targets_[k].sample;
      const SamplingParams& p = s.req.params;
      row_sampling_[k] = RowSampling{p.temperature, p.top_k, p.top_p, p.min_p, p.seed,
                                     s.req.stream_of(s.index), targets_[k].step};
      if (p.logprobs >= 0 || s.logit_rules.active() || targets_[k].prompt_pos > 0) {
        copy_rows_.push_back(static_cast<int32_t>(k));
      }
    }
    // Only rows that ask for logprobs or carry a bias or penalties cross to the host
    // (usually none).
    logits_.resize(copy_rows_.size() * vocab);
    const auto t = Clock::now();
    model_->forward_sample(in, row_sampling_, tokens_, copy_rows_, logits_);
    const double model_seconds = seconds_since(t);
    for (size_t j = 0; j < copy_rows_.size(); ++j) {
      const auto k = static_cast<size_t>(copy_rows_[j]);
      host_row(k, std::span<const float>(logits_.data() + j * vocab, vocab),
               targets_[k].draws() && targets_[k].sample->logit_rules.active());
    }
    return model_seconds;
  }
  logits_.resize(rows * vocab);
  const auto t = Clock::now();
  model_->forward(in, logits_);
  const double model_seconds = seconds_since(t);
  for (size_t k = 0; k < rows; ++k) {
    host_row(k, std::span<const float>(logits_.data() + k * vocab, vocab), targets_[k].draws());
  }
  return model_seconds;
}

void LLMEngine::host_row(size_t k, std::span<const float> logits, bool draw) {
  Sample& s = *targets_[k].sample;
  if (const int64_t pos = targets_[k].prompt_pos; pos > 0) {
    const int32_t token = s.seq.token_ids()[static_cast<size_t>(pos)];
    s.req.prompt_logprobs[static_cast<size_t>(pos - 1)] =
        token_logprobs(logits, token, s.req.params.prompt_logprobs);
    return;
  }
  if (!targets_[k].draws()) return;  // end_request: nothing drawn
  if (draw) {
    if (s.logit_rules.active()) {
      adjusted_.assign(logits.begin(), logits.end());
      s.logit_rules.apply(adjusted_);
      tokens_[k] = s.sampler.sample(adjusted_);
    } else {
      tokens_[k] = s.sampler.sample(logits);
    }
  }
  if (s.req.params.logprobs >= 0) {
    logprobs_[k] = token_logprobs(logits, tokens_[k], s.req.params.logprobs);
  }
}

// Samples 1..n-1 split off sample 0 after its prefill: its full blocks are shared, a partly
// filled last block is copied (copies_). Without a free block a child starts over as a
// waiting sequence instead (its prompt then comes from the prefix cache).
void LLMEngine::fork_samples(Request& r) {
  Sample& parent = *r.samples.front();
  for (size_t j = 1; j < r.samples.size(); ++j) {
    Sample& c = *r.samples[j];
    if (blocks_->can_fork(parent.seq)) {
      c.seq = blocks_->fork(parent.seq, c.seq.id(), copies_);
      ++stats_.num_forks;
    }
    scheduler_->add_fork(parent.seq, c.seq);
    c.in_scheduler = true;
  }
  r.forked = true;
}

}  // namespace kvattn
