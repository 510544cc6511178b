#include "engine/llm/engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

LLMEngine::LLMEngine(ModelWeights weights, std::optional<Tokenizer> tokenizer,
                     const LLMOptions& options)
    : options_(options), tokenizer_(std::move(tokenizer)) {
  KVATTN_CHECK(options.block_size > 0, "LLM: block_size must be > 0 but is ",
               options.block_size);
  KVATTN_CHECK(options.max_num_seqs > 0, "LLM: max_num_seqs must be > 0 but is ",
               options.max_num_seqs);
  KVATTN_CHECK(options.max_num_batched_tokens > 0,
               "LLM: max_num_batched_tokens must be > 0 but is ", options.max_num_batched_tokens);
  KVATTN_CHECK(options.kv_cache_bytes >= 0, "LLM: kv_cache_bytes must be >= 0 but is ",
               options.kv_cache_bytes);
  KVATTN_CHECK(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0,
               "LLM: gpu_memory_utilization must be in (0, 1] but is ",
               options.gpu_memory_utilization);
  ModelOptions mo;
  mo.num_threads = options.num_threads;
  mo.weight_format = options.weight_format.value_or(WeightFormat::kF32);
  mo.cuda_graphs = options.cuda_graphs;
  mo.fused_kernels = options.fused_kernels;
  mo.pdl = options.pdl;
  mo.max_decode_batch = options.max_num_seqs;
  mo.tensor_parallel = options.tensor_parallel;
  mo.kv_cache_dtype = options.kv_cache_dtype;
  KVATTN_CHECK(options.ctx_size >= 0, "LLM: ctx_size must be >= 0 (0: automatic) but is ",
               options.ctx_size);
  {
    ModelConfig& wc = weights.config;
    // max_position_embeddings, extended by a RoPE scaling made for it (scaled_context_length).
    const int64_t model_len =
        wc.max_position_embeddings > 0 ? scaled_context_length(wc) : (1 << 20);
    // The CPU's default context is capped: its pool is host memory, and a 128k-context model
    // would otherwise size it for contexts nobody asked for.
    int64_t default_len = options.device.is_cpu() ? std::min<int64_t>(model_len, 4096) : model_len;
    RopeScaling& rs = wc.rope_scaling;
    if (rs.type == RopeScaling::Type::kLongRope) {
      // LongRoPE (vLLM's rule): the factor list is fixed by the context, so by default the
      // context is the original one (short factors, HF's result for every such prompt); a
      // longer --ctx-size rotates every position with the long factors.
      default_len = std::min(default_len, rs.original_max_position_embeddings);
    }
    max_model_len_ = options.ctx_size > 0 ? std::min(options.ctx_size, model_len) : default_len;
    rs.use_long_factors = rs.type == RopeScaling::Type::kLongRope &&
                          max_model_len_ > rs.original_max_position_embeddings;
  }
  model_ = Model::create(std::move(weights), options.device, mo);
  phase_timing_ = options.phase_timing && model_->set_phase_timing(true);
  const ModelConfig& c = model_->config();

  if (c.eos_token_id >= 0) eos_ids_.push_back(static_cast<int32_t>(c.eos_token_id));
  for (int64_t id : c.extra_eos_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  if (tokenizer_) {
    for (int32_t id : tokenizer_->stop_ids()) eos_ids_.push_back(id);
  }
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());

  // Pool: the bytes asked for; else the model's device budget (GPU, after its warm-up);
  // else the smaller of the default and what max_num_seqs full contexts need.
  const int64_t bs = options.block_size;
  const int64_t per_block = model_->kv_block_bytes(bs);
  int64_t budget = options.kv_cache_bytes;
  if (budget == 0) {
    budget = std::max<int64_t>(0, model_->kv_cache_budget(options.max_num_batched_tokens,
                                                           options.gpu_memory_utilization));
  }
  if (budget == 0) {
    const int64_t full =
        options.max_num_seqs * ceil_div(std::min<int64_t>(max_model_len_, 32768), bs);  // blocks
    budget = std::min(LLM::kv_cache_bytes_default(options.device), full * per_block);
  }
  int64_t num_blocks = std::max<int64_t>(1, budget / per_block);
  num_blocks = std::min(num_blocks, ((int64_t{1} << 31) - 1) / bs);
  model_->allocate_kv_cache(num_blocks, bs);
  reset_blocks(num_blocks, bs);
  if (!options.kv_calibration_prompt.empty() || !options.kv_calibration_tokens.empty()) {
    calibrate_kv_scales(options.kv_calibration_prompt, options.kv_calibration_tokens);
  }
  // After the warm-up and any calibration: the timeline covers requests' steps only.
  step_timeline_ = options.step_timeline && model_->set_step_timeline(true);
}

void LLMEngine::reset_stats() {
  stats_ = {};
  if (step_timeline_) model_->clear_step_timeline();
}

std::optional<StepTimeline> LLMEngine::step_timeline() const {
  if (!step_timeline_) return std::nullopt;
  return model_->step_timeline();
}

void LLMEngine::check_request(size_t i, const std::vector<int32_t>& prompt,
                              const SamplingParams& params) const {
  validate(params);
  KVATTN_CHECK(params.n <= options_.max_num_seqs, "LLM: request ", i, ": SamplingParams::n is ",
               params.n, " but at most max_num_seqs (", options_.max_num_seqs,
               ") sequences run together");
  KVATTN_CHECK(!prompt.empty(), "LLM: prompt ", i, " is empty");
  const int64_t vocab = config().vocab_size;
  // Sampling ids (validate() checked them >= 0) must lie in the vocabulary.
  const auto check_id = [&](const char* what, int32_t token) {
    KVATTN_CHECK(token < vocab, "LLM: request ", i, ": ", what, " ", token,
                 ", outside the vocabulary [0, ", vocab, ")");
  };
  for (const auto& [token, bias] : params.logit_bias) check_id("logit_bias names token", token);
  for (const auto& seq : params.bad_words_ids) {
    for (int32_t token : seq) check_id("bad_words_ids holds", token);
  }
  for (int32_t token : params.allowed_token_ids) check_id("allowed_token_ids holds", token);
  if (params.structured.active()) {
    KVATTN_CHECK(tokenizer_.has_value(), "LLM: request ", i,
                 ": structured output needs the model's tokenizer (this model has none)");
    KVATTN_CHECK(!eos_ids_.empty() || !params.stop_token_ids.empty(), "LLM: request ", i,
                 ": structured output needs an end token (the model has none: give "
                 "stop_token_ids)");
    grammars_.get(params.structured);  // compiles it, or throws naming what is wrong
  }
  for (size_t t = 0; t < prompt.size(); ++t) {
    KVATTN_CHECK(prompt[t] >= 0 && prompt[t] < vocab, "LLM: prompt ", i, " token ", t, " is ",
                 prompt[t], ", outside the vocabulary [0, ", vocab, ")");
  }
  const auto n = static_cast<int64_t>(prompt.size());
  KVATTN_CHECK(n <= max_model_len_, "LLM: prompt ", i, " has ", n,
               " tokens but the context (ctx_size, --ctx-size) is ", max_model_len_);
  KVATTN_CHECK(n <= kv_cache_tokens(), "LLM: prompt ", i, " has ", n,
               " tokens but the KV cache holds only ", kv_cache_tokens(),
               " (raise LLMOptions::kv_cache_bytes: --kv-cache-mb on the command line)");
}

uint64_t LLMEngine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  check_request(next_request_id_, prompt, params);
  return enqueue(std::move(prompt), params, next_request_id_, 0);
}

namespace {

// The vocabulary's bytes for structured outputs; special tokens never match a grammar.
std::shared_ptr<const structured::TokenBytes> token_bytes_of(const Tokenizer& tokenizer) {
  const auto n = static_cast<size_t>(tokenizer.vocab_size());
  std::vector<std::string> bytes(n);
  std::vector<bool> eligible(n);
  for (size_t id = 0; id < n; ++id) {
    const auto t = static_cast<int32_t>(id);
    bytes[id] = tokenizer.token_bytes(t);
    eligible[id] = !tokenizer.is_special(t);
  }
  return std::make_shared<const structured::TokenBytes>(std::move(bytes), eligible);
}

}  // namespace

uint64_t LLMEngine::enqueue(std::vector<int32_t> prompt, const SamplingParams& params,
                            size_t event_index, uint64_t stream_base) {
  if (!has_unfinished()) reset_stats();
  auto r = std::make_unique<Request>();
  r->id = next_request_id_++;
  r->event_index = event_index;
  r->stream_base = stream_base;
  r->params = params;
  if (params.structured.active()) {
    r->structure = grammars_.get(params.structured);
    if (!token_bytes_) token_bytes_ = token_bytes_of(*tokenizer_);
    r->token_bytes = token_bytes_;
  }
  r->num_prompt_tokens = static_cast<int64_t>(prompt.size());
  r->num_unfinished = params.n;
  for (int j = 0; j < params.n; ++j) {
    r->samples.push_back(
        std::make_unique<Sample>(*r, static_cast<uint32_t>(j), next_seq_id_++, prompt, tokenizer(),
                                 eos_ids_));
    by_seq_[r->samples.back()->seq.id()] = r->samples.back().get();
  }
  stats_.num_prompt_tokens += r->num_prompt_tokens;
  const bool prompt_logprobs = params.prompt_logprobs >= 0;
  if (params.max_tokens == 0 && !prompt_logprobs) {
    for (auto& s : r->samples) ending_.push_back(s.get());
  } else {
    // Prompt log-probabilities: every prompt row computed here (no prefix-cache hit), in
    // chunks whose logits the host can take.
    Sequence& seq = r->samples.front()->seq;
    if (prompt_logprobs) {
      seq.set_reads_prefix_cache(false);
      r->prompt_logprobs.resize(static_cast<size_t>(r->num_prompt_tokens - 1));
    }
    scheduler_->add(seq, params.n, prompt_logprobs ? SamplingParams::kPromptLogprobsChunk : 0);
    r->samples.front()->in_scheduler = true;
  }
  const uint64_t id = r->id;
  requests_.emplace(id, std::move(r));
  return id;
}

std::vector<RequestOutput> LLMEngine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                               std::span<const SamplingParams> params,
                                               const TokenCallback& cb) {
  KVATTN_CHECK(!has_unfinished(), "LLM::generate: ", requests_.size(),
               " requests added with add_request are unfinished; step() them first");
  KVATTN_CHECK(params.size() == prompts.size() || params.size() == 1,
               "LLM::generate: params must hold 1 or ", prompts.size(),
               " (one per prompt) SamplingParams but holds ", params.size());
  const auto params_of = [&](size_t i) -> const SamplingParams& {
    return params.size() == 1 ? params[0] : params[i];
  };
  for (size_t i = 0; i < prompts.size(); ++i) check_request(i, prompts[i], params_of(i));
  reset_stats();
  const uint64_t base = next_request_id_;
  for (size_t i = 0; i < prompts.size(); ++i) enqueue(prompts[i], params_of(i), i, i);
  std::vector<RequestOutput> outs(prompts.size());
  while (has_unfinished()) {
    for (RequestOutput& o : step(cb)) outs[o.request_id - base] = std::move(o);
  }
  return outs;
}

std::vector<RequestOutput> LLMEngine::step(const TokenCallback& cb) {
  finished_.clear();
  if (!has_unfinished()) return {};
  try {
    run_step(cb);
  } catch (...) {
    abort_all();
    throw;
  }
  return std::move(finished_);
}

void LLMEngine::deliver(Sample& s, const TokenOutcome& o, const TokenCallback& cb) {
  Request& r = s.req;
  if (o.finished && s.in_scheduler) {
    scheduler_->finish(s.seq);
    s.in_scheduler = false;
  }
  if (cb) {
    TokenEvent e;
    e.index = r.event_index;
    e.sample = s.index;
    e.token = o.event_token;
    e.text = o.text;
    e.finished = o.finished;
    e.finish_reason = s.out.finish_reason;
    e.logprobs = o.logprobs;
    cb(e);
  }
  if (o.finished && --r.num_unfinished == 0) {
    for (auto& x : r.samples) by_seq_.erase(x->seq.id());
    finished_.push_back(r.take_output());
    const uint64_t id = r.id;
    requests_.erase(id);  // destroys r and s
  }
}

bool LLMEngine::abort_request(uint64_t id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request& r = *it->second;
  for (auto& s : r.samples) {
    if (s->in_scheduler) scheduler_->finish(s->seq);  // frees its blocks
    s->in_scheduler = false;
    by_seq_.erase(s->seq.id());
    std::erase(ending_, s.get());
  }
  requests_.erase(it);
  return true;
}

void LLMEngine::abort_all() {
  scheduler_->abort_all();
  requests_.clear();
  by_seq_.clear();
  ending_.clear();
}

int64_t cascade_auto_min_saved_tokens(const ModelConfig& config) {
  const int64_t per_token = std::max<int64_t>(1, config.num_kv_heads * config.head_dim);
  return (int64_t{32768} * 1024 + per_token - 1) / per_token;
}

void LLMEngine::reset_blocks(int64_t num_blocks, int64_t block_size) {
  blocks_ = std::make_unique<BlockManager>(num_blocks, block_size, options_.enable_prefix_caching);
  builder_ = std::make_unique<BatchMetadataBuilder>(*blocks_);
  int64_t cascade_tokens = options_.cascade_min_prefix_tokens;
  if (const char* e = std::getenv("KVATTN_CASCADE"); e != nullptr && *e != '\0') {
    cascade_tokens = std::strcmp(e, "auto") == 0 ? LLMOptions::kCascadeAuto
                                                 : std::max<int64_t>(0, std::atoll(e));
  }
  KVATTN_CHECK(cascade_tokens >= LLMOptions::kCascadeAuto,
               "LLM: cascade_min_prefix_tokens must be >= 0 (0 = off) or kCascadeAuto (-1) but is ",
               cascade_tokens);
  int64_t min_saved_tokens = 0;
  if (cascade_tokens == LLMOptions::kCascadeAuto) {
    // LLMOptions::cascade_min_prefix_tokens says where these figures come from.
    const bool on = options_.device.is_cuda();
    cascade_tokens = on ? 256 : 0;
    min_saved_tokens = on ? cascade_auto_min_saved_tokens(model_->config()) : 0;
  }
  build_options_ = BatchBuildOptions{};
  build_options_.cascade_min_prefix_blocks =
      cascade_tokens > 0 ? (cascade_tokens + block_size - 1) / block_size : 0;
  build_options_.cascade_min_saved_blocks = (min_saved_tokens + block_size - 1) / block_size;
  scheduler_ = std::make_unique<Scheduler>(
      *blocks_, SchedulerOptions{options_.max_num_seqs, options_.max_num_batched_tokens});
}

void LLMEngine::set_prefix_caching(bool on) {
  KVATTN_CHECK(!has_unfinished(), "LLM::set_prefix_caching: ", requests_.size(),
               " requests are unfinished; finish or abort them first");
  options_.enable_prefix_caching = on;
  reset_blocks(blocks_->num_blocks(), blocks_->block_size());
}

void LLMEngine::check_kv_cache_idle() const {
  blocks_->check_invariants();
  const BlockManagerStats s = blocks_->stats();
  KVATTN_CHECK(s.num_used_blocks == 0 && s.num_free_blocks == s.num_blocks,
               "LLM: the KV cache must be idle but ", s.num_used_blocks, " of ", s.num_blocks,
               " blocks are held (", s.num_sequences, " sequences, ", requests_.size(),
               " unfinished requests)");
}

}  // namespace kvattn
