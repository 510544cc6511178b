// Internal: one request (a prompt and its SamplingParams) and its n samples, and how a sampled
// token becomes output: stop tokens, stop strings, max_tokens and the model's context.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvattn/cache/sequence.h"
#include "kvattn/engine/llm.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/tokenizer.h"
#include "engine/sampling/logit_rules.h"
#include "engine/structured/compile.h"

namespace kvattn {

struct Request;

// One completion. Sample 0's sequence is the prompt's; the others start as placeholders with
// the prompt's tokens and become forks of sample 0 after its prefill.
struct Sample {
  // eos_ids: the model's end tokens (min_tokens holds them back: LogitRules).
  Sample(Request& request, uint32_t index, SeqId seq_id, std::vector<int32_t> prompt,
         const Tokenizer* tokenizer, std::span<const int32_t> eos_ids = {});

  Request& req;
  uint32_t index;
  Sequence seq;
  Sampler sampler;  // stream req.stream_base * n + index
  LogitRules logit_rules;  // SamplingParams' logit_bias and presence / frequency / repetition penalties
  std::optional<StreamDecoder> decoder;
  StopStringMatcher stops;
  CompletionOutput out;
  bool finished = false;
  bool in_scheduler = false;  // its sequence is queued or running
};

struct Request {
  uint64_t id = 0;
  size_t event_index = 0;   // TokenEvent::index
  uint64_t stream_base = 0; // generate()'s prompt index; 0 for add_request
  SamplingParams params;
  // params.structured compiled, and the vocabulary's bytes it is matched against.
  structured::CompiledStructure structure;
  std::shared_ptr<const structured::TokenBytes> token_bytes;
  std::vector<std::unique_ptr<Sample>> samples;  // params.n of them
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  // params.prompt_logprobs >= 0: RequestOutput::prompt_logprobs, filled as the prompt's rows
  // run (a recomputed row after a preemption writes the same entry again).
  std::vector<TokenLogprobs> prompt_logprobs;
  bool admitted_once = false;
  bool forked = false;      // samples 1..n-1 were split off sample 0
  int64_t num_unfinished = 0;

  uint64_t stream_of(uint32_t sample) const {
    return stream_base * static_cast<uint64_t>(params.n) + sample;
  }
  RequestOutput take_output();  // once every sample finished
};

// What ends a sample besides SamplingParams: the model's end tokens and context length.
struct StopRules {
  std::span<const int32_t> eos_ids;  // sorted
  int64_t max_model_len = 0;
};

// The result of one token for a sample: the event to send and whether the sample ended.
struct TokenOutcome {
  int32_t event_token = -1;  // -1: the token is not part of the output (a stop token)
  std::string text;          // what the event shows
  bool finished = false;
  const TokenLogprobs* logprobs = nullptr;  // the token's, in s.out.logprobs (when asked)
};

// Applies `token` to s: appends it to the output and the sequence unless it is a stop token
// (with `logprobs`, when given, to s.out.logprobs), runs the stop-string matcher and the
// length limits, and fills s.out when the sample ends.
TokenOutcome accept_token(Sample& s, int32_t token, const StopRules& rules,
                          const TokenLogprobs* logprobs = nullptr);

// Ends s without a token (max_tokens == 0, or the pool cannot hold it): kLength.
TokenOutcome end_sample(Sample& s);

}  // namespace kvattn
