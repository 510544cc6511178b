// fp8 KV-cache calibration: one prefill of a prompt with the model recording the largest |k|
// and |v| per (layer, KV head); the scales become amax / 448, so each head's largest value
// lands on e4m3's largest, as vLLM's calculate_kv_scales does. The prefill itself stored its
// KV with the old scales, so the block manager (and its prefix cache) is rebuilt afterwards:
// no later request can hit those blocks.
#include <algorithm>

#include "engine/llm/engine.h"
#include "engine/model/kv_scales.h"

namespace kvattn {

void LLMEngine::calibrate_kv_scales(const std::string& text, std::vector<int32_t> ids) {
  KVATTN_CHECK(model_->kv_dtype() == DType::kF8E4M3,
               "LLM: kv_calibration_prompt needs kv_cache_dtype fp8 but the KV cache is ",
               model_->kv_dtype());
  if (!text.empty()) {
    KVATTN_CHECK(tokenizer_.has_value(), "LLM: kv_calibration_prompt needs a tokenizer");
    ids = tokenizer_->encode(text, /*parse_special=*/false);
  }
  KVATTN_CHECK(!ids.empty(), "LLM: kv_calibration_prompt encodes to no tokens");
  const int64_t cap = std::min(max_model_len_, kv_cache_tokens());
  if (static_cast<int64_t>(ids.size()) > cap) ids.resize(static_cast<size_t>(cap));

  model_->track_kv_amax(true);
  SamplingParams p;
  p.max_tokens = 1;
  p.ignore_eos = true;
  p.detokenize = false;
  generate({ids}, std::span<const SamplingParams>(&p, 1), {});
  model_->track_kv_amax(false);

  const ModelConfig& c = model_->config();
  std::vector<float> k_amax(static_cast<size_t>(c.num_layers * c.num_kv_heads));
  std::vector<float> v_amax(k_amax.size());
  model_->kv_amax(k_amax, v_amax);
  model_->set_kv_scales(cpu_model::scales_from_amax(k_amax), cpu_model::scales_from_amax(v_amax));

  reset_blocks(blocks_->num_blocks(), blocks_->block_size());
  stats_ = {};
}

}  // namespace kvattn
