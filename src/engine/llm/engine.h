// Internal: the state behind LLM, and the step loop.
//
// One step (step()):
//  1. the Scheduler plans it: decode rows, prompt chunks, admissions, preemptions;
//  2. BatchMetadataBuilder turns the rows into one BatchContext (built once per step);
//  3. the model computes the step; only the last token of each sequence that completes in
//     this step reaches the lm_head (logit_rows). When the model samples on its device,
//     forward_sample() draws the tokens there (one RowSampling per row); otherwise forward()
//     returns those logits and each sample's host Sampler draws;
//  4. the KV is marked computed; a prompt with n > 1 forks its samples now (its row appears n
//     times in logit_rows, one draw per sample; the fork's block copies run before the next
//     step); each token is appended or ends its sample, whose blocks then return to the pool.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/llm/request.h"
#include "engine/llm/scheduler.h"
#include "engine/structured/compile.h"
#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {

class LLMEngine {
 public:
  LLMEngine(ModelWeights weights, std::optional<Tokenizer> tokenizer, const LLMOptions& options);

  uint64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  // Thread-safe (LLM::prepare_structured): touches only grammars_.
  void prepare_structured(const StructuredOutput& output) const { grammars_.get(output); }
  std::vector<RequestOutput> step(const TokenCallback& cb);
  bool has_unfinished() const { return !requests_.empty(); }
  bool abort_request(uint64_t id);
  int64_t num_running_seqs() const { return scheduler_->num_running(); }
  int64_t num_waiting_seqs() const { return scheduler_->num_waiting(); }
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      std::span<const SamplingParams> params,
                                      const TokenCallback& cb);

  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const GenerationStats& stats() const { return stats_; }
  std::optional<StepTimeline> step_timeline() const;
  BlockManagerStats cache_stats() const { return blocks_->stats(); }
  void check_kv_cache_idle() const;
  void set_prefix_caching(bool on);
  int64_t kv_cache_tokens() const { return blocks_->num_blocks() * blocks_->block_size(); }
  int64_t kv_bytes_per_token() const {
    const ModelConfig& c = model_->config();
    return 2 * c.num_layers * c.num_kv_heads * c.head_dim * dtype_size(model_->kv_dtype());
  }
  int64_t max_model_len() const { return max_model_len_; }

 private:
  // A sampled row: which sample draws it (fork rows of one prompt name each sample).
  // A logit row's use: a token drawn for `sample` (step: tokens it generated before), or with
  // prompt_pos > 0 the log-probability of prompt token prompt_pos (prompt_logprobs; nothing
  // drawn), or with end_request the prompt's last row of a max_tokens == 0 request (its
  // samples end without a token).
  struct RowTarget {
    Sample* sample;
    uint64_t step;
    int64_t prompt_pos = 0;
    bool end_request = false;
    bool draws() const { return prompt_pos == 0 && !end_request; }
  };

  void check_request(size_t i, const std::vector<int32_t>& prompt,
                     const SamplingParams& params) const;
  uint64_t enqueue(std::vector<int32_t> prompt, const SamplingParams& params,
                   size_t event_index, uint64_t stream_base);
  void run_step(const TokenCallback& cb);
  // logit_rows_ and targets_ for the step's rows.
  void plan_rows(const SchedulerStep& st);
  // tokens_ := one draw per logit row (on the device or on the host), and logprobs_ for the
  // rows whose request asks (SamplingParams::logprobs); returns the seconds spent inside the
  // model.
  double sample_rows(const ModelInput& in);
  // What the host does with row k's logits (host float32, the raw model's): the draw when
  // `draw` (a sample with LogitRules draws from a copy they adjusted), then its logprobs
  // when asked.
  void host_row(size_t k, std::span<const float> logits, bool draw);
  // Charges one step (or a loop turn without a batch: model_seconds 0, counted false) to
  // stats_'s prefill or decode split.
  void account_step(bool prefill, double seconds, double model_seconds, bool counted);
  void fork_samples(Request& r);
  void deliver(Sample& s, const TokenOutcome& o, const TokenCallback& cb);
  void abort_all();
  // fp8 KV cache: scales := amax / 448 of the prompt's keys and values (kv_calibration.cpp).
  // The prompt is `text` tokenised, or `tokens` when the text is empty.
  void calibrate_kv_scales(const std::string& text, std::vector<int32_t> tokens);
  // A fresh block manager (no cached prefix) of num_blocks, with its builder and scheduler.
  void reset_blocks(int64_t num_blocks, int64_t block_size);

  LLMOptions options_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<BatchMetadataBuilder> builder_;
  BatchBuildOptions build_options_;  // cascade decode (LLMOptions::cascade_min_prefix_tokens)
  std::unique_ptr<Scheduler> scheduler_;
  int64_t max_model_len_ = 0;
  bool phase_timing_ = false;  // the model times its phases (LLMOptions::phase_timing)
  bool step_timeline_ = false;  // the model records its step timeline (LLMOptions::step_timeline)
  void reset_stats();  // stats_ and the model's step timeline start over
  std::vector<int32_t> eos_ids_;  // the model's end tokens (ignored with ignore_eos)
  // Structured outputs: recent grammars, and the vocabulary's bytes (made at first use).
  mutable structured::GrammarCache grammars_;
  mutable std::shared_ptr<const structured::TokenBytes> token_bytes_;
  SeqId next_seq_id_ = 0;
  uint64_t next_request_id_ = 0;

  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;  // unfinished
  std::unordered_map<SeqId, Sample*> by_seq_;
  std::vector<Sample*> ending_;  // end at the next step without a token (max_tokens == 0)
  std::vector<RequestOutput> finished_;
  GenerationStats stats_;

  // Per step, reused.
  std::vector<int32_t> logit_rows_;
  std::vector<RowTarget> targets_;
  int64_t num_drawn_ = 0;  // targets_ that draw a token
  std::vector<RowSampling> row_sampling_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  std::vector<TokenLogprobs> logprobs_;  // per row; meaningful where the row's request asks
  std::vector<int32_t> copy_rows_;       // device sampling: rows whose logits the host needs
  std::vector<float> adjusted_;          // one row's logits after its sample's LogitRules
  std::vector<Request*> fork_now_;
  std::vector<BlockCopy> copies_;
};

}  // namespace kvattn
