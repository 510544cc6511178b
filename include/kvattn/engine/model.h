// Model: a Llama- or Qwen3-family decoder whose attention runs through kvattn's Attention layer
// over a paged KV cache. One forward() is one engine step: the packed new tokens of every
// scheduled sequence plus the BatchContext the metadata builder made for them.
//
// Per layer:  x += o_proj(attn(rope(qk_norm(q)), rope(qk_norm(k)), v))   on rmsnorm(x)
//             x += down(silu(gate(h)) * up(h))                           on h = rmsnorm(x)
// Logits come only for the rows listed in logit_rows (the last token of each sequence).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "kvattn/cache/batch_context.h"
#include "kvattn/cache/block_manager.h"
#include "kvattn/core/tensor.h"
#include "kvattn/engine/model_config.h"
#include "kvattn/engine/weights.h"

namespace kvattn {

struct ModelInput {
  std::span<const int32_t> token_ids;   // [num_tokens], sequences packed one after another
  std::span<const int32_t> positions;   // [num_tokens], position of each token in its sequence
  std::span<const int32_t> logit_rows;  // token rows whose logits are wanted, in output order
  const BatchContext* ctx = nullptr;    // host tensors; the model moves them to its device
};

// How the CPU model stores its projection and embedding matrices. Activations and
// accumulation are float32 in every case; decode streams every weight once per step, so its
// time follows the bytes: kF16/kBF16 halve it, kQ8 (int8 with one float32 scale per 32
// weights, 8.5 bits a weight) nearly quarters it. kGguf keeps a GGUF file's quantized
// blocks where the CPU has dot products for their type (Q4_0, Q4_1, Q8_0, Q2_K..Q6_K, given
// as ModelWeights::quantized and read in place from the mapping; Q4_1 is 5 bits a weight),
// with int8-quantized activations in decode steps; other tensors keep their precision: F32,
// F16 and BF16 ones as kF32 / kF16 / kBF16 (exact), other quantized types (Q5_0, Q5_1) as
// kF16 (their values to 11 bits). Before session 50 they became kQ8, whose rounding moved
// greedy tokens of float GGUF files away from llama.cpp's well beyond near-ties.
enum class WeightFormat : uint8_t { kF32, kF16, kBF16, kQ8, kGguf };
std::string_view weight_format_name(WeightFormat f);  // "f32" | "f16" | "bf16" | "q8" | "gguf"

// The KV cache's element type. kAuto: the model's own (float32 on the CPU, bfloat16 on the
// GPU). kBF16: bfloat16 (on the CPU, float32 K/V are rounded into it). kFP8: float8_e4m3
// with static float32 scales per (layer, KV head), 1.0 until set_kv_scales(); the cache
// holds 1-byte elements (store_kv.h has the format). kFP8 is CPU-only for now: creating a
// CUDA model with it throws.
enum class KVCacheDType : uint8_t { kAuto, kBF16, kFP8 };
std::string_view kv_cache_dtype_name(KVCacheDType d);  // "auto" | "bf16" | "fp8"

struct ModelOptions {
  int num_threads = 0;  // CPU: OpenMP threads (GEMMs and attention); 0 => tuned (see below)
  WeightFormat weight_format = WeightFormat::kF32;  // CPU only; the GPU model uses bf16
  // GPU only: a pure decode step (one token per sequence) of at most max_decode_batch
  // sequences is padded to the next size of a ladder (1, 2, 4, 8, then every 16, then
  // max_decode_batch) with rows that write and read nothing, its inputs go to fixed device
  // buffers, and it replays the CUDA graph captured for that size. false => the same padded
  // step launched eagerly (debugging): both modes give bit-identical logits and tokens.
  // Prefill and mixed steps, and decode steps above max_decode_batch (<= 0: all), run eagerly
  // without padding.
  bool cuda_graphs = true;
  int64_t max_decode_batch = 256;  // the largest padded decode batch (and graph)
  // GPU only: fused per-layer kernels (q/k norm + RoPE + the KV cache write in one kernel, so
  // Attention skips its store_kv). false, or the environment variable KVATTN_UNFUSED=1, runs
  // the unfused kernels: the reference the fused path's greedy tokens must equal.
  bool fused_kernels = true;
  // GPU only: the model's own kernels (norms, q/k norm + RoPE, SiLU, GEMV, sampling) launched
  // with programmatic dependent launch, so each one's launch and prologue overlap the previous
  // kernel's tail (sm_90+ and CUDA 12.3+ only; ignored elsewhere). On by default (session 12,
  // H200: single stream +1-3%, logits equal with it off); the environment variable
  // KVATTN_PDL=1 or =0 overrides this either way; tokens and logits are the same either way.
  bool pdl = true;
  // GPU only: decode steps of at most 4 rows (one rank, not Gemma, SiLU MLP) run each
  // layer's input norm inside the qkv GEMV and the post-attention norm and SiLU * up inside
  // the gate_up GEMV (cuda_gemv.h's fused entries): 6 kernels a layer instead of 9. On by
  // default (session 12, H200: Qwen3-0.6B single stream 717 -> 812 tok/s, SmolLM2 805 -> 917;
  // at 8 rows the fused GEMVs are slower, so larger steps keep the unfused path); the
  // environment variable KVATTN_FUSED_GEMV=1 or =0 overrides this either way.
  bool fused_gemv = true;
  // Megatron-style tensor parallelism over this many ranks (heads, MLP width and vocab split;
  // all-reduce after o_proj and down_proj). CPU: ranks are threads. It must divide
  // num_heads, num_kv_heads and intermediate_size.
  int tensor_parallel = 1;
  KVCacheDType kv_cache_dtype = KVCacheDType::kAuto;
};

// How to draw the token of one logit row on the model's device. The draw is a function of
// the row's logits and (seed, stream, step) only, so it does not depend on the batch the row
// is in. Filters as in Sampler (sampler.h): temperature < kGreedyTemperature or top_k == 1
// is greedy argmax, lowest id on ties (exactly argmax() of the logits forward() returns);
// otherwise temperature, top-k (ties at the k-th logit go to the lowest ids), softmax, top-p
// (the shortest prefix in (p desc, id asc) order reaching top_p of the mass), min-p, then a
// draw. The GPU draws with
// Philox keyed by (seed, stream, step), not with Sampler's generator: the same distribution,
// not the same tokens as host sampling.
struct RowSampling {
  float temperature = 0.0f;
  int32_t top_k = 0;    // <= 0 => off
  float top_p = 1.0f;   // >= 1 => off
  float min_p = 0.0f;   // <= 0 => off
  uint64_t seed = 0;    // SamplingParams::seed
  uint64_t stream = 0;  // which sequence of the request set (its index; a sample of n > 1 adds)
  uint64_t step = 0;    // how many tokens that sequence has generated before this one
};

// Where one forward() spent its wall time (Model::set_phase_timing). The three add up to the
// forward's wall time as the model measured it.
struct PhaseTimes {
  double attention_s = 0.0;  // KV writes and attention
  double gemm_s = 0.0;       // the projections, the MLP and the lm_head (matmuls, with any
                             // tensor-parallel all-reduce after them)
  double other_s = 0.0;      // everything else: embedding rows, norms, RoPE, activations
};

// The device's view of consecutive steps (Model::set_step_timeline): each step's device work
// is bracketed by two events (before its first operation, after its last), so `busy` is the
// time the device spent inside steps and the gaps are the times it waited between one step's
// end and the next one's start (the host's scheduling, metadata and launches, and the round
// trip of the step's token copy).
struct StepTimeline {
  int64_t steps = 0;
  double span_s = 0.0;  // the first step's start to the last step's end
  double busy_s = 0.0;  // the steps' end - start, summed
  double gap_s = 0.0;   // start of step k + 1 - end of step k, summed
  double gap_median_s = 0.0, gap_p90_s = 0.0, gap_max_s = 0.0;
};
// The timeline of steps whose device start and end times (seconds, one clock) are given in
// step order; a gap that measures below zero (clock rounding) counts as zero.
StepTimeline summarize_step_timeline(std::span<const double> starts, std::span<const double> ends);

class Model {
 public:
  virtual ~Model() = default;

  // Builds the model for `device` from float32 host weights, which it consumes. Throws when
  // the device is unsupported in this build (cuda without KVATTN_WITH_CUDA) or the weights
  // are inconsistent with the config.
  static std::unique_ptr<Model> create(ModelWeights weights, Device device,
                                       const ModelOptions& options = {});

  virtual const ModelConfig& config() const = 0;
  virtual Device device() const = 0;
  // Element type of the KV cache (ModelOptions::kv_cache_dtype resolved for this device).
  virtual DType kv_dtype() const = 0;

  // float8_e4m3 caches (kv_dtype() == kF8E4M3). set_kv_scales: the static dequantisation
  // scales, [num_layers * num_kv_heads] each (layer-major, this model's KV heads), finite and
  // > 0; they apply to KV written from now on (the engine sets them before any request).
  // track_kv_amax(true) clears and starts recording, per (layer, KV head), the largest |k|
  // and |v| forward() writes into the cache (before quantisation; NaN ignored); kv_amax()
  // reads them out in the same layout. The defaults throw: a model without fp8 support.
  virtual void set_kv_scales(std::span<const float> k_scale, std::span<const float> v_scale);
  virtual void track_kv_amax(bool on);
  virtual void kv_amax(std::span<float> k_amax, std::span<float> v_amax) const;
  // Bytes one cache block of `block_size` tokens takes over all layers, K and V.
  int64_t kv_block_bytes(int64_t block_size) const;

  // Allocates the paged cache, [num_blocks, block_size, num_kv_heads, head_dim] per layer for
  // K and for V, and binds every layer's Attention to it. Reallocating drops the cached KV.
  virtual void allocate_kv_cache(int64_t num_blocks, int64_t block_size) = 0;
  virtual int64_t num_kv_blocks() const = 0;
  virtual int64_t kv_block_size() const = 0;

  // One step. `logits` is host float32 [input.logit_rows.size(), vocab_size].
  virtual void forward(const ModelInput& input, std::span<float> logits) = 0;

  // Device sampling. When samples_on_device() is true, forward_sample() runs the step and
  // draws one token per logit row on the device (only the ids come back: no logits cross
  // to the host); `rows` and `tokens` have input.logit_rows.size() entries. Otherwise the
  // caller runs forward() and samples the logits on the host; the default forward_sample()
  // throws.
  // `copy_rows` (increasing indices into the logit rows) name rows whose logits also come
  // back, in that order, into `logits` (host float32 [copy_rows.size(), vocab_size]): what
  // the host needs for SamplingParams::logprobs and penalties; only those rows cross.
  virtual bool samples_on_device() const { return false; }
  virtual void forward_sample(const ModelInput& input, std::span<const RowSampling> rows,
                              std::span<int32_t> tokens, std::span<const int32_t> copy_rows,
                              std::span<float> logits);
  void forward_sample(const ModelInput& input, std::span<const RowSampling> rows,
                      std::span<int32_t> tokens) {
    forward_sample(input, rows, tokens, {}, {});
  }

  // Per-phase timing of forward() and forward_sample(). set_phase_timing(true) returns false
  // when this model cannot time its phases (last_phase_times() then stays zero). The CPU
  // model reads a clock at each phase boundary on the calling thread (about ten reads a
  // layer, cheap enough to leave on). The CUDA model records an event at each boundary and
  // runs its steps eagerly while timing is on (no CUDA graphs): its times are eager steps'.
  virtual bool set_phase_timing(bool on) {
    (void)on;
    return false;
  }
  virtual PhaseTimes last_phase_times() const { return {}; }

  // Step timeline (StepTimeline). set_step_timeline(true) returns false when this model
  // cannot record one (the CPU model: its steps are the host's own time). The CUDA model
  // records two events a step on its stream, CUDA graphs staying on. step_timeline() covers
  // the steps since it was turned on or last cleared (it waits for the device's last event).
  virtual bool set_step_timeline(bool on) {
    (void)on;
    return false;
  }
  virtual StepTimeline step_timeline() { return {}; }
  virtual void clear_step_timeline() {}

  // Fork's copy-on-write: block dst := block src in every layer's K and V (BlockManager::fork
  // returns the copies). Must run before the next forward() reads those blocks. Ids must be in
  // range, src != dst, and no dst may repeat or also be a src; a bad batch throws and copies
  // nothing. GPU: one kernel launch, ordered before the next step on the model's stream.
  virtual void copy_kv_blocks(std::span<const BlockCopy> copies) = 0;

  // Memory planning, before allocate_kv_cache(). The GPU model drops any cache it has, sizes
  // its activation buffers for max(max_num_batched_tokens, max_decode_batch) tokens and
  // max(min(max_num_batched_tokens, 512), max_decode_batch) logit rows, runs a prefill of
  // max_num_batched_tokens tokens and the largest padded decode step on a one-block pool (its
  // CUDA graph captured and replayed, its fixed buffers at the widest block table), and
  // returns memory_fraction * (the device's total memory) - (memory in use now, all
  // processes, minus the one-block pool) - (the measured size of one decode graph for each
  // other ladder size), never negative. The next allocate_kv_cache() then captures every
  // ladder size at once. A later step larger than planned still works: the buffers grow
  // (memory outside the budget) and the graphs are recaptured. The CPU model returns 0 (no
  // device-specific budget: the engine's default applies).
  virtual int64_t kv_cache_budget(int64_t max_num_batched_tokens, double memory_fraction) {
    (void)max_num_batched_tokens;
    (void)memory_fraction;
    return 0;
  }
};

}  // namespace kvattn
