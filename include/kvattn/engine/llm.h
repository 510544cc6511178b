// LLM: the engine's front door. Loads a model (GGUF file or HF directory) and its tokenizer,
// owns the paged KV pool and the BlockManager, and serves requests with continuous batching:
// every step decodes one token of each running sequence and fills the rest of a token budget
// with prompt chunks (chunked prefill), reusing cached prefixes; new requests join between
// steps; when the KV pool runs out the youngest sequence is preempted and later recomputed.
//
//   kvattn::LLM llm({.model = "models/SmolLM2-135M-Instruct.Q4_1.gguf"});
//   auto out = llm.generate({llm.chat_prompt("What is the capital of France?")},
//                           {.max_tokens = 64},
//                           [](const kvattn::TokenEvent& e) { std::cout << e.text; });
//
// Or request by request, driving the steps yourself:
//   uint64_t id = llm.add_request(llm.encode("Hello"), {.max_tokens = 16});
//   while (llm.has_unfinished_requests())
//     for (RequestOutput& done : llm.step()) use(done);   // done.request_id == id
//
// Scheduling, preemption and chunking never change a greedy token on the CPU: each
// sequence's output equals the output of running it alone. On the GPU, CUDA graphs change no
// token either; different batch shapes may round bf16 differently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/cache/block_manager.h"
#include "kvattn/core/device.h"
#include "kvattn/engine/model.h"
#include "kvattn/engine/model_config.h"
#include "kvattn/engine/sampler.h"
#include "kvattn/engine/tokenizer.h"
#include "kvattn/engine/weights.h"

namespace kvattn {

struct LLMOptions {
  std::string model;              // a .gguf file, or an HF directory (config.json + safetensors)
  Device device = Device::cpu();
  int num_threads = 0;            // CPU threads (OpenMP); 0 => all cores
  // CPU weight storage. Unset: kGguf for GGUF files (dot products on the file's own blocks,
  // read in place from the mapping; float tensors keep their precision, other types become
  // kF16: model.h), kF32 otherwise (exact HF checkpoints).
  std::optional<WeightFormat> weight_format;
  int64_t block_size = 16;        // tokens per KV block
  // KV pool size. 0 => the model's device budget (GPU: gpu_memory_utilization, measured
  // after a warm-up); where it has none (CPU), the smaller of kv_cache_bytes_default() and
  // what max_num_seqs sequences of ctx_size tokens need.
  int64_t kv_cache_bytes = 0;
  // Context length, llama.cpp's --ctx-size: the tokens one sequence may hold (prompt and
  // output), at most the model's context. 0 => the model's context on the GPU, and on the
  // CPU min(model's context, 4096), where it also sizes the default pool: max_num_seqs
  // sequences of this many tokens (at most kv_cache_bytes_default()), not more.
  int64_t ctx_size = 0;
  int64_t max_num_seqs = 64;             // running sequences at most (each sample counts)
  // Query tokens per step: one per decoding sequence, the rest for prompt chunks (longer
  // prompts are split over several steps). Keep it >= max_num_seqs, or some decoding
  // sequences wait a step.
  int64_t max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
  // GPU: with kv_cache_bytes == 0 the pool takes this fraction of the device's memory, less
  // what the model needs after a warm-up of the largest step (Model::kv_cache_budget).
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;  // GPU: replay decode steps from CUDA graphs (false: eager)
  bool fused_kernels = true;  // GPU: ModelOptions::fused_kernels (KVATTN_UNFUSED=1: off)
  bool pdl = true;  // GPU: ModelOptions::pdl, programmatic dependent launch (KVATTN_PDL=1/0 overrides)
  // Cascade decode: a decode step whose sequences all begin with the same cached blocks (a
  // shared prompt prefix of >= this many tokens, from the prefix cache) attends to them once
  // for the whole batch (BatchContext::cascade_*; a non-causal paged prefill of every query
  // row over the shared pages, the rest by the decode kernel, merged by log-sum-exp), so the
  // shared pages are read once per step instead of once per sequence. Such steps run eagerly
  // on the GPU (no CUDA graph).
  //   kCascadeAuto (the default): on the GPU, prefixes of >= 256 tokens shared so that the
  //     step skips enough token reads ((rows - 1) x prefix) to pay for an eager step's
  //     launches: 32768 at Qwen3-0.6B's 8 KV heads x 128 dims, scaled by the inverse of the
  //     model's KV heads x head_dim (cascade_auto_min_saved_tokens). Measured on the prefix
  //     workload: bf16 1.39x (session 12); fp8 1.28x (session 13, the shared prefix
  //     dequantized to bf16 first; docs/notes/cascade-decode.md). Off on the CPU (not timed
  //     there).
  //   0: off.   N > 0: on for every device and cache dtype, prefixes of >= N tokens.
  // KVATTN_CASCADE=N or =auto overrides.
  static constexpr int64_t kCascadeAuto = -1;
  int64_t cascade_min_prefix_tokens = kCascadeAuto;
  // Tensor parallelism over this many ranks (GPU: devices device.index .. + N - 1, with
  // NCCL; CPU: threads). It must divide num_heads, num_kv_heads and intermediate_size.
  int tensor_parallel = 1;
  // KV cache element type (model.h). kFP8 (CPU only for now) stores 1-byte e4m3 elements, so
  // a byte budget holds twice the tokens of bf16 (four times float32's), with static float32
  // scales per (layer, KV head): 1.0, or, when kv_calibration_prompt is set, amax / 448 of
  // that prompt's keys and values (plain text, no chat template), measured by one prefill
  // when the LLM is built; the prefix cache forgets that prefill.
  // Time each step's model work by phase (attention, GEMMs, other; GenerationStats's step
  // splits) where the model can (Model::set_phase_timing: the CPU model; cheap there).
  bool phase_timing = false;
  // Record the device's step timeline where the model can (Model::set_step_timeline: the
  // CUDA model, two events a step, graphs on); LLM::step_timeline() reads it.
  bool step_timeline = false;
  KVCacheDType kv_cache_dtype = KVCacheDType::kAuto;
  std::string kv_calibration_prompt;
  std::vector<int32_t> kv_calibration_tokens;  // the same as token ids (used when the text is empty)
  LoadProgress on_load_progress;         // fraction of the weights loaded, in [0, 1]
};

// kStop: a stop token or stop string. kLength: max_tokens, the model's context, or a sequence
// that outgrew the whole KV pool (it ends with the tokens it has).
enum class FinishReason : uint8_t { kStop, kLength };
std::string_view finish_reason_name(FinishReason r);  // "stop" | "length"

// One completion of a prompt.
struct CompletionOutput {
  std::string text;                // generated text (stop string / stop token excluded)
  std::vector<int32_t> token_ids;  // generated ids, the stop token excluded
  FinishReason finish_reason = FinishReason::kLength;
  int32_t stop_token = -1;         // the id that ended it, if any
  // SamplingParams::logprobs >= 0: one entry per token_ids entry (the stop token has none).
  std::vector<TokenLogprobs> logprobs;
};

// One prompt's result. With SamplingParams::n > 1, `samples` holds the n completions in
// sample order; the top-level text/token_ids/finish_reason/stop_token repeat samples[0], so
// n == 1 code reads them directly.
struct RequestOutput {
  std::string text;
  std::vector<int32_t> token_ids;
  FinishReason finish_reason = FinishReason::kLength;
  int32_t stop_token = -1;
  std::vector<TokenLogprobs> logprobs;  // samples[0]'s
  // SamplingParams::prompt_logprobs >= 0: entry i for prompt token i + 1 given tokens 0..i
  // (the first prompt token has no context, so no entry: num_prompt_tokens - 1 entries).
  std::vector<TokenLogprobs> prompt_logprobs;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;   // prompt tokens served by the prefix cache (first admission)
  uint64_t request_id = 0;         // add_request's id (generate: its own requests' ids)
  std::vector<CompletionOutput> samples;
};

// Where the wall time of a set of steps went. model_seconds is the model's forward calls;
// with phase timing (LLMOptions::phase_timing, on a model that supports it) it splits into
// attention, GEMMs and other model work (other: what the model's phase clock charged to
// neither, plus the call's own overhead), so attention + gemm + other == model. host_seconds
// is the rest of the step loop (scheduling, metadata, host sampling, callbacks).
struct StepTimeSplit {
  int64_t steps = 0;
  double model_seconds = 0.0;
  double attention_seconds = 0.0, gemm_seconds = 0.0, other_seconds = 0.0;
  double host_seconds = 0.0;
  // Keys the steps' attention attended, per layer and KV head: each row's sequence length at
  // the end of its step, summed (a decode row reads that many keys of its cache). With the
  // model's KV bytes a key, attended_keys / attention_seconds is decode's achieved read rate.
  int64_t attended_keys = 0;
  double seconds() const { return model_seconds + host_seconds; }
  StepTimeSplit& operator+=(const StepTimeSplit& o);
};

// Cascade auto's saved-reads threshold for a model (LLMOptions::cascade_min_prefix_tokens):
// 32768 token reads at 8 KV heads x head_dim 128 (the bytes a step must skip to pay for its
// eager launches), scaled by 1024 / (num_kv_heads x head_dim), rounded up.
int64_t cascade_auto_min_saved_tokens(const ModelConfig& config);

struct GenerationStats {
  int64_t num_prompt_tokens = 0;   // over every prompt
  int64_t num_cached_tokens = 0;   // prompt tokens the prefix cache served
  int64_t num_prefill_tokens = 0;  // prompt tokens computed (prompt - cached, plus recompute)
  double prefill_seconds = 0.0;    // steps that computed prompt tokens (their first token too)
  // Steps that only decode (no prompt token), and the tokens they generated: their ratio is
  // the decode speed. Decode rows riding along in a prefill step count as prefill time.
  int64_t num_decode_tokens = 0;
  double decode_seconds = 0.0;
  int64_t num_generated_tokens = 0;  // every generated token of every sample (stop tokens too)
  int64_t num_steps = 0;
  int64_t num_mixed_steps = 0;       // steps with decode rows and prompt chunks together
  int64_t num_cascade_steps = 0;     // decode steps run in the cascade (shared-prefix) form
  int64_t num_partial_prefills = 0;  // prompt chunks that stopped short (chunked prefill)
  int64_t num_preemptions = 0;
  // Samples (n > 1) forked off their prompt's blocks; one that found no free block for its
  // copy of the last block instead waits and recomputes its tail (not counted here).
  int64_t num_forks = 0;
  // Wall time inside the model's forward calls (the device's work plus waiting for it) and
  // the rest of the step loop (scheduling, metadata, sampling on the host, callbacks).
  double model_seconds = 0.0;
  double host_seconds = 0.0;
  // The same time per kind of step: steps that computed prompt tokens (mixed ones too), and
  // decode-only steps (which also take the host time of loop turns that ran no batch).
  // phases_timed: their attention/gemm/other fields are measured (else zero).
  bool phases_timed = false;
  StepTimeSplit prefill_steps, decode_steps;
  StepTimeSplit all_steps() const {
    StepTimeSplit s = prefill_steps;
    s += decode_steps;
    return s;
  }
  double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? num_prefill_tokens / prefill_seconds : 0.0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? num_decode_tokens / decode_seconds : 0.0;
  }
  double prefix_hit_rate() const {
    return num_prompt_tokens > 0 ? static_cast<double>(num_cached_tokens) / num_prompt_tokens
                                 : 0.0;
  }
};

// One generated token of one prompt, as it is produced. `text` is what may be shown now: it is
// empty while a UTF-8 character or a possible stop string is incomplete. The last event of a
// sample has finished == true; its token is -1 when a stop token ended the sample (stop
// tokens are not part of the output) and its text flushes what was held back. A stop string
// ends the sample at the token that completed it; the text stops right before the string.
struct TokenEvent {
  size_t index = 0;        // generate(): which prompt; step(): the request id
  uint32_t sample = 0;     // which of the prompt's n samples
  int32_t token = -1;
  std::string_view text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;
  // The token's log-probabilities when its request asked (SamplingParams::logprobs >= 0) and
  // the token is part of the output; null otherwise. Valid during the callback only.
  const TokenLogprobs* logprobs = nullptr;
};
using TokenCallback = std::function<void(const TokenEvent&)>;

class LLMEngine;

// Not thread-safe: one thread drives an LLM (generate, or add_request and step).
class LLM {
 public:
  explicit LLM(const LLMOptions& options);
  // From parts already in memory: tests and models without a tokenizer (then only the
  // token-id generate() works and outputs have no text). options.model is ignored.
  LLM(ModelWeights weights, std::optional<Tokenizer> tokenizer, const LLMOptions& options);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // Text prompts are encoded with the model's tokenizer (special tokens parsed; BOS added when
  // the tokenizer asks for it).
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const SamplingParams& params,
                                      const TokenCallback& on_token = {});
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const SamplingParams& params,
                                      const TokenCallback& on_token = {});
  // One SamplingParams per prompt (e.g. a max_tokens each); sizes must match.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      const TokenCallback& on_token = {});
  // generate() runs until its prompts finish and needs an idle engine: it throws while
  // requests added with add_request are unfinished.

  // Incremental serving. add_request queues a prompt (checked now; throws kvattn::Error) and
  // returns its id, increasing from 0 per LLM. step() runs one engine step (prefill chunks
  // and decode together) and returns the requests that finished in it; on_token sees each
  // token of the step (TokenEvent::index is the request id). A step that throws aborts every
  // unfinished request, releasing its blocks.
  uint64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  // Compiles a structured output (schema, regex, grammar) into the cache add_request and
  // generate read, throwing kvattn::Error naming what is wrong. The one member that is
  // thread-safe: a server calls it on its request thread, so a new schema's compile does not
  // hold up the thread that steps the engine. Optional: add_request compiles what it misses.
  void prepare_structured(const StructuredOutput& output) const;
  std::vector<RequestOutput> step(const TokenCallback& on_token = {});
  bool has_unfinished_requests() const;
  // Drops an unfinished request between steps (a client went away): its samples leave the
  // scheduler and their KV blocks return to the pool now; no output or event follows. False
  // when the id is unknown or already finished.
  bool abort_request(uint64_t request_id);
  // Sequences (samples) the scheduler holds: running (holding blocks) and waiting.
  int64_t num_running_seqs() const;
  int64_t num_waiting_seqs() const;

  // The model's chat template applied to one user message, with the generation prompt.
  // Throws when the model has no recognised template.
  std::string chat_prompt(std::string_view user_message) const;
  bool has_chat_template() const;

  std::vector<int32_t> encode(std::string_view text) const;
  const ModelConfig& config() const;
  const Tokenizer* tokenizer() const;  // null when the LLM has none
  // Since generate() began, or since a request reached an idle engine.
  const GenerationStats& last_stats() const;
  // The device's step timeline over the same steps as last_stats() (LLMOptions::
  // step_timeline); nullopt when it is off or the model cannot record one. Waits for the
  // device's last step.
  std::optional<StepTimeline> step_timeline() const;
  BlockManagerStats cache_stats() const;
  // Throws kvattn::Error unless every KV block is free (no request holds one, none leaked)
  // and the BlockManager's invariants hold. True when idle after any sequence of calls.
  void check_kv_cache_idle() const;
  // Turns the prefix cache on or off between runs (LLMOptions::enable_prefix_caching); the
  // cached prefixes are dropped either way. Throws while requests are unfinished.
  void set_prefix_caching(bool on);
  int64_t kv_cache_tokens() const;  // pool capacity in tokens
  // The K and V bytes one token holds in the cache over every layer and KV head (the cache's
  // element size; fp8 caches' per-head scales not counted).
  int64_t kv_bytes_per_token() const;
  int64_t max_model_len() const;    // the context one sequence may use (ctx_size resolved)

  static int64_t kv_cache_bytes_default(Device device);

 private:
  std::unique_ptr<LLMEngine> engine_;
};

}  // namespace kvattn
