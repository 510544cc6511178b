// The engine options shared by generate, bench and serve (--kv-cache-dtype, --kv-calibration-prompt, --weights) -> LLMOptions.
#include "commands.h"

#include <charconv>
#include <cstdio>
#include <system_error>

namespace kvattn::cli {

void apply_kv_cache_args(const KvCacheArgs& a, LLMOptions& o) {
  if (a.dtype == "auto") {
    o.kv_cache_dtype = KVCacheDType::kAuto;
  } else if (a.dtype == "bf16") {
    o.kv_cache_dtype = KVCacheDType::kBF16;
  } else {
    KVATTN_CHECK(a.dtype == "fp8", "--kv-cache-dtype must be auto, bf16 or fp8 but is '",
                 a.dtype, "'");
    o.kv_cache_dtype = KVCacheDType::kFP8;
  }
  KVATTN_CHECK(a.calibration_prompt.empty() || o.kv_cache_dtype == KVCacheDType::kFP8,
               "--kv-calibration-prompt needs --kv-cache-dtype fp8 (the scales are fp8's) but "
               "--kv-cache-dtype is ", a.dtype);
  o.kv_calibration_prompt = a.calibration_prompt;
  if (a.cascade_min_prefix == "auto") {
    o.cascade_min_prefix_tokens = LLMOptions::kCascadeAuto;
  } else {
    const std::string& s = a.cascade_min_prefix;
    int64_t n = -1;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    KVATTN_CHECK(ec == std::errc() && end == s.data() + s.size() && n >= 0,
                 "--cascade-min-prefix must be auto or a number of tokens >= 0 (0 = off) but is '",
                 s, "'");
    o.cascade_min_prefix_tokens = n;
  }
}

void apply_weights_arg(const std::string& weights, LLMOptions& o) {
  for (WeightFormat f :
       {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8,
        WeightFormat::kGguf}) {
    if (weights == weight_format_name(f)) o.weight_format = f;
  }
}

void warn_on_sizing(const LLM& llm, const LLMOptions& o, bool quiet) {
  if (quiet) return;
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  if (o.ctx_size > llm.max_model_len()) {
    std::fprintf(stderr,
                 "kvattn: warning: --ctx-size %lld is more than the model's context; using %lld\n",
                 ll(o.ctx_size), ll(llm.max_model_len()));
  }
  if (o.kv_cache_bytes > 0 && llm.kv_cache_tokens() < llm.max_model_len()) {
    std::fprintf(stderr,
                 "kvattn: warning: --kv-cache-mb %lld holds %lld tokens, fewer than one "
                 "sequence's context (%lld): longer sequences end early; raise --kv-cache-mb or "
                 "lower --ctx-size\n",
                 ll(o.kv_cache_bytes >> 20), ll(llm.kv_cache_tokens()), ll(llm.max_model_len()));
  }
}

}  // namespace kvattn::cli
