// Sampling: turns one row of logits into the next token id, and decides when a sequence stops.
//
// Order of the filters (HF's and vLLM's): temperature, then top-k, then softmax, then top-p
// (keep the smallest most-probable set whose mass reaches top_p), then min-p (drop
// p < min_p * p_max), then renormalise and draw. temperature < kGreedyTemperature (or
// top_k == 1) is greedy argmax; ties go to the lowest id, so greedy never depends on the seed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvattn {

// Temperatures below this are greedy (vLLM's sampling epsilon): 1 / t overflows float for t
// near 1e-39, and long before that the draw is the argmax anyway.
inline constexpr float kGreedyTemperature = 1e-5f;
inline bool greedy_sampling(float temperature, int top_k) {
  return temperature < kGreedyTemperature || top_k == 1;
}

// Structured output (vLLM's structured outputs / guided decoding, OpenAI's response_format,
// llama.cpp's json_schema and grammar): every generated token keeps the text a prefix of what
// `kind` allows, and the model's end tokens (or stop_token_ids) can come only where the text
// is whole. Once the text is complete and nothing may follow, only an end token can be drawn
// (it ends the sample even before min_tokens). The rules: docs/notes/structured-output.md.
struct StructuredOutput {
  enum class Kind {
    kNone,
    kJsonObject,  // any JSON object
    kJsonSchema,  // `spec`: a JSON Schema (text) the JSON value must satisfy
    kRegex,       // `spec`: a regular expression the whole text must match
    kChoice,      // exactly one of `choices`
    kGrammar,     // `spec`: a GBNF grammar (llama.cpp's), from its rule `root`
  };
  Kind kind = Kind::kNone;
  std::string spec;
  std::vector<std::string> choices;
  bool active() const { return kind != Kind::kNone; }
};

struct SamplingParams {
  float temperature = 0.0f;  // < kGreedyTemperature => greedy
  int top_k = 0;             // <= 0 => off
  float top_p = 1.0f;        // >= 1 => off
  float min_p = 0.0f;        // <= 0 => off
  // Sample j of prompt i of a generate() call draws from a generator seeded with
  // (seed, i * n + j), so output does not depend on what else is in the batch
  // (LLM::add_request: prompt index 0, so equal requests draw equally).
  uint64_t seed = 0;
  // Parallel samples: n completions of the same prompt. The prompt is prefilled once; the
  // samples then share its KV blocks (copy-on-write) and each draws from its own stream.
  int n = 1;
  int max_tokens = 256;                   // generated tokens, stop token excluded
  // vLLM's min_tokens: until this many tokens are generated, the model's end tokens (unless
  // ignore_eos) and stop_token_ids are masked out of the distribution (they cannot be drawn
  // and end nothing). Unlike vLLM, which defers stop strings too, those apply from the first
  // token. <= max_tokens.
  int min_tokens = 0;
  bool ignore_eos = false;                // do not stop at the model's end/eos tokens
  std::vector<int32_t> stop_token_ids;    // extra stop ids (apply even with ignore_eos)
  std::vector<std::string> stop;          // stop strings; the text is cut before the match
  bool include_stop_str_in_output = false;  // vLLM's: cut after the match instead
  bool skip_special_tokens = true;        // drop special tokens from the output text
  // false: no text (outputs and events carry ids only), which saves host time per token in
  // benchmarks. Stop strings need text, so they must be empty then.
  bool detokenize = true;
  // >= 0: every generated token carries its log-probability under the model and the
  // `logprobs` most likely tokens' (TokenLogprobs; at most kMaxLogprobs). As vLLM's default
  // (and OpenAI's), these are the raw distribution's: log_softmax of the logits before
  // temperature, top-k/top-p/min-p. -1: none (no logits leave the device for them).
  int logprobs = -1;
  static constexpr int kMaxLogprobs = 20;
  // >= 0: every prompt token after the first carries its log-probability given the tokens
  // before it and the `prompt_logprobs` most likely tokens' there (RequestOutput::
  // prompt_logprobs; vLLM's prompt_logprobs, what OpenAI's echo + logprobs return). Such a
  // request computes every prompt token (the prefix cache serves it none) in chunks of at
  // most kPromptLogprobsChunk tokens a step, since each prompt row's logits cross to the host.
  // With max_tokens == 0 the prompt still runs and nothing is generated. -1: none.
  int prompt_logprobs = -1;
  static constexpr int64_t kPromptLogprobsChunk = 128;
  // Penalties on tokens already seen, applied to the logits before temperature and the
  // filters (vLLM's and OpenAI's order), as vLLM defines them: a token generated c > 0 times
  // loses frequency_penalty * c + presence_penalty (OpenAI's, [-2, 2]; generated tokens
  // only); a token in the prompt or the output has its logit divided by repetition_penalty
  // when positive, multiplied when not (vLLM's / HF's, > 0, 1 = off). Log-probabilities stay
  // the raw model's. On CUDA a penalised (or biased) row is drawn on the host.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
  // Added to the named tokens' logits before the penalties, each bias in [-100, 100]
  // (OpenAI's logit_bias: -100 bans a token, 100 all but forces it). Ids must lie in the
  // vocabulary (LLM checks them); a repeated id adds once per entry.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's allowed_token_ids: when not empty, only these ids can be drawn (every other logit
  // is -inf before the bias and the penalties); ids must lie in the vocabulary (LLM checks
  // them). Log-probabilities stay the raw model's. On CUDA such a row is drawn on the host.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words as token sequences (the server tokenizes the words): a one-token
  // sequence is never drawn; a longer one's last token is not drawn right after the sample's
  // generated tokens end with the rest of it. Ids must lie in the vocabulary (LLM checks them).
  std::vector<std::vector<int32_t>> bad_words_ids;
  // The text must follow this (StructuredOutput); needs a model with a tokenizer and an end
  // token, and is refused with ignore_eos. On CUDA such a row is drawn on the host.
  StructuredOutput structured;
};

// One token's log-probability.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// A generated token's log-probability and the most likely alternatives at its step.
struct TokenLogprobs {
  float logprob = 0.0f;           // of the generated token
  std::vector<TokenLogprob> top;  // most likely first; equal logits: the lower id first
};

// log_softmax(logits)[token] and the top_n largest entries (0 <= top_n <= kMaxLogprobs), in
// float64 internally. A row with a NaN gives NaN log-probabilities; -inf logits give -inf.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

// Checks the parameters; throws kvattn::Error naming the bad one. A structured output's spec
// (schema, regex, grammar) is checked when it is compiled: by LLM::add_request / generate, or
// earlier by LLM::prepare_structured.
void validate(const SamplingParams& params);

// Per-sequence sampler. Holds its own generator and scratch space (no allocation per token
// once warmed up).
class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t stream_index);

  int32_t sample(std::span<const float> logits);

  // The distribution sample() draws from: probabilities after every filter, 0 where masked,
  // summing to 1. For greedy, a one-hot row. Used by tests and for debugging.
  std::vector<float> probabilities(std::span<const float> logits);

 private:
  // Fills cand_ with the surviving ids and probs_ with their (unnormalised) probabilities.
  void filter(std::span<const float> logits);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> cand_;
  std::vector<float> probs_;
  std::vector<uint32_t> order_;
  std::vector<int32_t> scratch_ids_;
  std::vector<float> scratch_probs_;
};

int32_t argmax(std::span<const float> logits);

// Stop strings over a stream of text pieces. Text that might be the start of a stop string is
// held back until the next piece decides it, so a streaming client never sees any part of the
// stop string.
class StopStringMatcher {
 public:
  // include_match: the emitted text ends after the matched stop string (vLLM's
  // include_stop_str_in_output) instead of before it.
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_match = false);

  struct Result {
    std::string emit;      // text safe to show now
    bool stopped = false;  // a stop string matched; emit ends right before it (or after it)
  };
  Result push(std::string_view piece);
  // End of the stream without a match: what was held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  bool include_match_ = false;
  std::string held_;
  size_t max_stop_ = 0;
};

}  // namespace kvattn
