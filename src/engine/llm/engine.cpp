#include "engine/llm/engine.h"

#include <algorithm>
#include <span>

#include "kvattn/core/error.h"

namespace kvattn {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Request::Request(size_t index_, std::vector<int32_t> prompt, const SamplingParams& params,
                 const Tokenizer* tokenizer, SeqId id)
    : index(index_),
      seq(id, std::move(prompt)),
      sampler(params, index_),
      stops(params.stop) {
  if (tokenizer != nullptr) decoder.emplace(*tokenizer, params.skip_special_tokens);
  out.num_prompt_tokens = seq.num_prompt_tokens();
}

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
  ModelOptions mo;
  mo.num_threads = options.num_threads;
  mo.weight_format = options.weight_format.value_or(WeightFormat::kF32);
  model_ = Model::create(std::move(weights), options.device, mo);
  const ModelConfig& c = model_->config();
  max_model_len_ = c.max_position_embeddings > 0 ? c.max_position_embeddings : (1 << 20);

  if (c.eos_token_id >= 0) eos_ids_.push_back(static_cast<int32_t>(c.eos_token_id));
  for (int64_t id : c.extra_eos_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  if (tokenizer_) {
    for (int32_t id : tokenizer_->stop_ids()) eos_ids_.push_back(id);
  }
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());

  const int64_t bs = options.block_size;
  const int64_t per_block = model_->kv_block_bytes(bs);
  int64_t budget = options.kv_cache_bytes;
  if (budget == 0) {
    const int64_t full = options.max_num_seqs * ceil_div(std::min<int64_t>(max_model_len_, 32768), bs);
    budget = std::min(LLM::kv_cache_bytes_default(options.device), full * per_block);
  }
  int64_t num_blocks = std::max<int64_t>(1, budget / per_block);
  num_blocks = std::min(num_blocks, ((int64_t{1} << 31) - 1) / bs);
  model_->allocate_kv_cache(num_blocks, bs);
  blocks_ = std::make_unique<BlockManager>(num_blocks, bs, options.enable_prefix_caching);
  builder_ = std::make_unique<BatchMetadataBuilder>(*blocks_);
}

void LLMEngine::check_prompt(size_t i, const std::vector<int32_t>& prompt) const {
  KVATTN_CHECK(!prompt.empty(), "LLM::generate: prompt ", i, " is empty");
  const int64_t vocab = config().vocab_size;
  for (size_t t = 0; t < prompt.size(); ++t) {
    KVATTN_CHECK(prompt[t] >= 0 && prompt[t] < vocab, "LLM::generate: prompt ", i, " token ", t,
                 " is ", prompt[t], ", outside the vocabulary [0, ", vocab, ")");
  }
  const auto n = static_cast<int64_t>(prompt.size());
  KVATTN_CHECK(n <= max_model_len_, "LLM::generate: prompt ", i, " has ", n,
               " tokens but the model's context is ", max_model_len_);
  KVATTN_CHECK(n <= kv_cache_tokens(), "LLM::generate: prompt ", i, " has ", n,
               " tokens but the KV cache holds only ", kv_cache_tokens(),
               " (raise LLMOptions::kv_cache_bytes)");
}

std::vector<RequestOutput> LLMEngine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                               const SamplingParams& params,
                                               const TokenCallback& cb) {
  validate(params);
  for (size_t i = 0; i < prompts.size(); ++i) check_prompt(i, prompts[i]);
  params_ = &params;
  cb_ = &cb;
  requests_.clear();
  waiting_.clear();
  running_.clear();
  stats_ = {};
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests_.push_back(
        std::make_unique<Request>(i, prompts[i], params, tokenizer(), next_seq_id_++));
    stats_.num_prompt_tokens += static_cast<int64_t>(prompts[i].size());
  }
  for (auto& r : requests_) {
    if (params.max_tokens == 0) {
      finish(*r, FinishReason::kLength, -1, "");
    } else {
      waiting_.push_back(r.get());
    }
  }
  try {
    while (!waiting_.empty() || !running_.empty()) run_step();
  } catch (...) {
    // Leave the pool consistent for the next call: release what the requests hold.
    for (Request* r : running_) blocks_->free(r->seq);
    running_.clear();
    waiting_.clear();
    throw;
  }
  std::vector<RequestOutput> outs;
  outs.reserve(requests_.size());
  for (auto& r : requests_) outs.push_back(std::move(r->out));
  requests_.clear();
  return outs;
}

bool LLMEngine::schedule_prefill() {
  int64_t budget = options_.max_num_batched_tokens;
  for (Request* r : running_) {
    if (!r->prefilling || budget == 0) continue;
    const int64_t n = std::min(r->seq.num_uncomputed_tokens(), budget);
    batch_.push_back({&r->seq, n});
    batch_requests_.push_back(r);
    budget -= n;
  }
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Request* r = waiting_.front();
    if (!blocks_->can_allocate(r->seq)) {
      if (running_.empty()) {  // nothing will ever free a block for it
        waiting_.pop_front();
        finish(*r, FinishReason::kLength, -1, "");
        continue;
      }
      break;
    }
    waiting_.pop_front();
    blocks_->allocate(r->seq);
    if (!r->admitted_once) {
      r->out.num_cached_tokens = r->seq.num_cached_tokens();
      stats_.num_cached_tokens += r->seq.num_cached_tokens();
      r->admitted_once = true;
    }
    r->prefilling = true;
    running_.push_back(r);
    const int64_t n = std::min(r->seq.num_uncomputed_tokens(), budget);
    batch_.push_back({&r->seq, n});
    batch_requests_.push_back(r);
    budget -= n;
  }
  return !batch_.empty();
}

void LLMEngine::schedule_decode() {
  size_t i = 0;
  while (i < running_.size()) {
    Request* r = running_[i];
    if (blocks_->can_append(r->seq)) {
      blocks_->append(r->seq);
      ++i;
      continue;
    }
    if (running_.size() == 1) {  // the pool cannot hold this sequence even alone
      finish(*r, FinishReason::kLength, -1, "");
      return;
    }
    preempt(*running_.back());
  }
  for (Request* r : running_) {
    batch_.push_back({&r->seq, 1});
    batch_requests_.push_back(r);
  }
}

void LLMEngine::preempt(Request& r) {
  blocks_->free(r.seq);
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  waiting_.push_front(&r);
  ++stats_.num_preemptions;
}

void LLMEngine::run_step() {
  batch_.clear();
  batch_requests_.clear();
  if (!schedule_prefill()) schedule_decode();
  if (batch_.empty()) return;

  const auto t0 = Clock::now();
  const BatchMetadata& meta = builder_->build(batch_);
  BatchContext ctx = meta.ctx;
  ctx.decode_plan = DecodePlan{1, 0};
  logit_rows_.clear();
  sampled_.clear();
  bool prefill = false;
  int64_t prefill_tokens = 0;
  int64_t row = 0;
  for (size_t i = 0; i < batch_.size(); ++i) {
    const Sequence& s = *batch_[i].seq;
    const int64_t n = batch_[i].num_new_tokens;
    if (batch_requests_[i]->prefilling) {
      prefill = true;
      prefill_tokens += n;
    }
    if (s.num_computed_tokens() + n == s.num_tokens()) {
      logit_rows_.push_back(static_cast<int32_t>(row + n - 1));
      sampled_.push_back(batch_requests_[i]);
    }
    row += n;
  }
  const int64_t vocab = config().vocab_size;
  logits_.resize(logit_rows_.size() * vocab);
  ModelInput in;
  in.token_ids = {meta.token_ids.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.positions = {meta.positions.ptr<const int32_t>(), static_cast<size_t>(meta.num_tokens)};
  in.logit_rows = logit_rows_;
  in.ctx = &ctx;
  model_->forward(in, logits_);
  for (size_t i = 0; i < batch_.size(); ++i) {
    blocks_->mark_computed(batch_requests_[i]->seq, batch_[i].num_new_tokens);
  }

  for (size_t i = 0; i < sampled_.size(); ++i) {
    Request& r = *sampled_[i];
    const int32_t token = r.sampler.sample(
        std::span<const float>(logits_.data() + i * vocab, static_cast<size_t>(vocab)));
    r.prefilling = false;
    on_token(r, token);
  }
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  ++stats_.num_steps;
  if (prefill) {
    stats_.prefill_seconds += dt;
    stats_.num_prefill_tokens += prefill_tokens;
  } else {
    stats_.decode_seconds += dt;
    stats_.num_decode_tokens += static_cast<int64_t>(sampled_.size());
  }
}

bool LLMEngine::is_stop_token(int32_t token) const {
  const auto& extra = params_->stop_token_ids;
  if (std::find(extra.begin(), extra.end(), token) != extra.end()) return true;
  return !params_->ignore_eos && std::binary_search(eos_ids_.begin(), eos_ids_.end(), token);
}

void LLMEngine::on_token(Request& r, int32_t token) {
  if (is_stop_token(token)) {
    std::string tail = r.decoder ? r.decoder->flush() : std::string();
    auto m = r.stops.push(tail);
    if (!m.stopped) m.emit += r.stops.flush();
    finish(r, FinishReason::kStop, token, std::move(m.emit), -1);
    return;
  }
  r.out.token_ids.push_back(token);
  r.seq.append_token(token);
  auto m = r.stops.push(r.decoder ? r.decoder->push(token) : std::string());
  if (m.stopped) {
    finish(r, FinishReason::kStop, -1, std::move(m.emit), token);
    return;
  }
  const bool length = static_cast<int64_t>(r.out.token_ids.size()) >= params_->max_tokens ||
                      r.seq.num_tokens() >= max_model_len_;
  if (length) {
    std::string tail = r.decoder ? r.decoder->flush() : std::string();
    auto f = r.stops.push(tail);
    m.emit += f.emit;
    if (!f.stopped) m.emit += r.stops.flush();
    finish(r, f.stopped ? FinishReason::kStop : FinishReason::kLength, -1, std::move(m.emit),
           token);
    return;
  }
  r.out.text += m.emit;
  if (*cb_) {
    TokenEvent e;
    e.index = r.index;
    e.token = token;
    e.text = m.emit;
    (*cb_)(e);
  }
}

void LLMEngine::finish(Request& r, FinishReason reason, int32_t stop_token, std::string text,
                       int32_t event_token) {
  r.out.text += text;
  r.out.finish_reason = reason;
  r.out.stop_token = stop_token;
  r.finished = true;
  if (r.seq.is_allocated()) blocks_->free(r.seq);
  auto it = std::find(running_.begin(), running_.end(), &r);
  if (it != running_.end()) running_.erase(it);
  if (*cb_) {
    TokenEvent e;
    e.index = r.index;
    e.token = event_token;
    e.text = text;
    e.finished = true;
    e.finish_reason = reason;
    (*cb_)(e);
  }
}

}  // namespace kvattn
