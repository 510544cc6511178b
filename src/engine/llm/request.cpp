#include "engine/llm/request.h"

#include <algorithm>

namespace kvattn {
namespace {

void finish(Sample& s, FinishReason reason, int32_t stop_token, const std::string& text) {
  s.out.text += text;
  s.out.finish_reason = reason;
  s.out.stop_token = stop_token;
  s.finished = true;
}

bool is_stop_token(const Sample& s, int32_t token, const StopRules& rules) {
  // min_tokens: LogitRules masks the end ids until then; none ends the sample early, unless
  // a complete structured output allows nothing else.
  if (static_cast<int64_t>(s.out.token_ids.size()) < s.req.params.min_tokens &&
      !s.logit_rules.structure_complete()) {
    return false;
  }
  const auto& extra = s.req.params.stop_token_ids;
  if (std::find(extra.begin(), extra.end(), token) != extra.end()) return true;
  return !s.req.params.ignore_eos &&
         std::binary_search(rules.eos_ids.begin(), rules.eos_ids.end(), token);
}

}  // namespace

Sample::Sample(Request& request, uint32_t index_, SeqId seq_id, std::vector<int32_t> prompt,
               const Tokenizer* tokenizer, std::span<const int32_t> eos_ids)
    : req(request),
      index(index_),
      seq(seq_id, std::move(prompt)),
      sampler(request.params, request.stream_of(index_)),
      logit_rules(request.params, seq.token_ids(), eos_ids, request.structure.grammar,
                  request.token_bytes, request.structure.frames),
      stops(request.params.stop, request.params.include_stop_str_in_output) {
  if (tokenizer != nullptr && request.params.detokenize) {
    decoder.emplace(*tokenizer, request.params.skip_special_tokens);
  }
}

TokenOutcome accept_token(Sample& s, int32_t token, const StopRules& rules,
                          const TokenLogprobs* logprobs) {
  TokenOutcome o;
  if (is_stop_token(s, token, rules)) {
    auto m = s.stops.push(s.decoder ? s.decoder->flush() : std::string());
    if (!m.stopped) m.emit += s.stops.flush();
    finish(s, FinishReason::kStop, token, m.emit);
    o.text = std::move(m.emit);
    o.finished = true;
    return o;
  }
  s.out.token_ids.push_back(token);
  if (logprobs != nullptr) {
    s.out.logprobs.push_back(*logprobs);
    o.logprobs = &s.out.logprobs.back();
  }
  s.seq.append_token(token);
  s.logit_rules.on_generated(token);
  o.event_token = token;
  auto m = s.stops.push(s.decoder ? s.decoder->push(token) : std::string());
  if (m.stopped) {
    finish(s, FinishReason::kStop, -1, m.emit);
    o.text = std::move(m.emit);
    o.finished = true;
    return o;
  }
  const bool length =
      static_cast<int64_t>(s.out.token_ids.size()) >= s.req.params.max_tokens ||
      s.seq.num_tokens() >= rules.max_model_len;
  if (length) {
    auto f = s.stops.push(s.decoder ? s.decoder->flush() : std::string());
    m.emit += f.emit;
    if (!f.stopped) m.emit += s.stops.flush();
    finish(s, f.stopped ? FinishReason::kStop : FinishReason::kLength, -1, m.emit);
    o.text = std::move(m.emit);
    o.finished = true;
    return o;
  }
  s.out.text += m.emit;
  o.text = std::move(m.emit);
  return o;
}

TokenOutcome end_sample(Sample& s) {
  finish(s, FinishReason::kLength, -1, "");
  TokenOutcome o;
  o.finished = true;
  return o;
}

RequestOutput Request::take_output() {
  RequestOutput r;
  r.num_prompt_tokens = num_prompt_tokens;
  r.num_cached_tokens = num_cached_tokens;
  r.request_id = id;
  r.samples.reserve(samples.size());
  for (auto& s : samples) r.samples.push_back(std::move(s->out));
  const CompletionOutput& first = r.samples.front();
  r.text = first.text;
  r.token_ids = first.token_ids;
  r.finish_reason = first.finish_reason;
  r.stop_token = first.stop_token;
  r.logprobs = first.logprobs;
  r.prompt_logprobs = std::move(prompt_logprobs);
  return r;
}

}  // namespace kvattn
