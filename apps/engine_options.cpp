// The engine options shared by generate, bench and serve (--kv-cache-dtype, --kv-calibration-prompt, --weights) -> LLMOptions.
#include "commands.h"

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
  KVATTN_CHECK(a.calibration_prompt.empty() || !o.device.is_cuda(),
               "--kv-calibration-prompt is not supported with --device cuda yet (the CUDA model "
               "does not record K/V maxima); fp8 on CUDA runs with scales 1.0");
  KVATTN_CHECK(a.calibration_prompt.empty() || o.kv_cache_dtype == KVCacheDType::kFP8,
               "--kv-calibration-prompt needs --kv-cache-dtype fp8 (the scales are fp8's) but "
               "--kv-cache-dtype is ", a.dtype);
  o.kv_calibration_prompt = a.calibration_prompt;
  KVATTN_CHECK(a.cascade_min_prefix >= 0, "--cascade-min-prefix must be >= 0 (0 = off) but is ",
               a.cascade_min_prefix);
  o.cascade_min_prefix_tokens = a.cascade_min_prefix;
}

void apply_weights_arg(const std::string& weights, LLMOptions& o) {
  for (WeightFormat f :
       {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8,
        WeightFormat::kGguf}) {
    if (weights == weight_format_name(f)) o.weight_format = f;
  }
}

}  // namespace kvattn::cli
