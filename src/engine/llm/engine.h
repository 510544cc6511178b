// Internal: the state behind LLM. One generate() call at a time.
//
// Scheduling (nano-vllm's shape, all prompts admitted up front):
// - A step is a prefill step while any sequence has more than one uncomputed token or a
//   waiting sequence can be admitted: those sequences get up to max_num_batched_tokens new
//   tokens (longer prompts are chunked over several steps). Otherwise it is a decode step over
//   every running sequence.
// - A sequence is sampled at the step that computes its last token.
// - Decode needs a block for each new token; when the pool is full the most recently admitted
//   sequence is preempted (its blocks freed, re-admitted later, recomputing through the prefix
//   cache).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvattn/cache/batch_builder.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/sequence.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/tokenizer.h"

namespace kvattn {

struct Request {
  Request(size_t index, std::vector<int32_t> prompt, const SamplingParams& params,
          const Tokenizer* tokenizer, SeqId id);

  size_t index;
  Sequence seq;
  Sampler sampler;
  std::optional<StreamDecoder> decoder;
  StopStringMatcher stops;
  RequestOutput out;
  bool admitted_once = false;
  bool prefilling = false;  // admitted, first token of this admission not sampled yet
  bool finished = false;
};

class LLMEngine {
 public:
  LLMEngine(ModelWeights weights, std::optional<Tokenizer> tokenizer, const LLMOptions& options);

  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const SamplingParams& params, const TokenCallback& cb);

  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const GenerationStats& stats() const { return stats_; }
  BlockManagerStats cache_stats() const { return blocks_->stats(); }
  int64_t kv_cache_tokens() const { return blocks_->num_blocks() * blocks_->block_size(); }
  int64_t max_model_len() const { return max_model_len_; }

 private:
  void check_prompt(size_t i, const std::vector<int32_t>& prompt) const;
  bool schedule_prefill();
  void schedule_decode();
  void run_step();
  void on_token(Request& r, int32_t token);
  // Ends r: appends `text`, releases its blocks, and sends its last event (carrying
  // event_token, -1 when the last token is not part of the output).
  void finish(Request& r, FinishReason reason, int32_t stop_token, std::string text,
              int32_t event_token = -1);
  void preempt(Request& r);
  bool is_stop_token(int32_t token) const;

  LLMOptions options_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<BatchMetadataBuilder> builder_;
  int64_t max_model_len_ = 0;
  std::vector<int32_t> eos_ids_;  // the model's end tokens (ignored with ignore_eos)
  SeqId next_seq_id_ = 0;

  // Per generate() call.
  const SamplingParams* params_ = nullptr;
  const TokenCallback* cb_ = nullptr;
  std::vector<std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in admission order
  GenerationStats stats_;

  // Per step, reused.
  std::vector<ScheduledSequence> batch_;
  std::vector<Request*> batch_requests_;
  std::vector<int32_t> logit_rows_;
  std::vector<Request*> sampled_;
  std::vector<float> logits_;
};

}  // namespace kvattn
