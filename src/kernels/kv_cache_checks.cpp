#include "kv_cache_checks.h"

#include <cmath>

#include "validate.h"

namespace kvattn::detail {

void check_cache_dtype(std::string_view fn, std::string_view name, const TensorView& cache,
                       DType src, std::string_view src_name) {
  if (cache.dtype == src) return;
  const bool cpu = cache.device.is_cpu();
  if (cache.dtype == DType::kF8E4M3) {
    // CUDA: 16-bit sources only (the kernels convert e4m3 to the query's type).
    KVATTN_CHECK(cpu || src == DType::kBF16 || src == DType::kF16, fn, ": ", name,
                 ": a float8_e4m3 cache on CUDA needs bfloat16 or float16 ", src_name,
                 " but ", src_name, " is ", src);
    return;
  }
  if (cpu && cache.dtype == DType::kBF16 && src == DType::kF32) return;
  KVATTN_FAIL(fn, ": ", name, " dtype must be ", src, " (", src_name, "'s) or float8_e4m3",
              cpu && src == DType::kF32 ? " or bfloat16" : "", " but is ", cache.dtype);
}

void check_kv_scale(std::string_view fn, std::string_view name, const TensorView& scale,
                    std::string_view cache_name, const TensorView& cache, int64_t num_kv_heads) {
  if (!scale.defined()) return;
  KVATTN_CHECK(cache.dtype == DType::kF8E4M3, fn, ": ", name,
               " applies to float8_e4m3 caches only but ", cache_name, " dtype is ",
               cache.dtype);
  check_rank(fn, name, scale, 1);
  check_dtype(fn, name, scale, DType::kF32);
  check_dim(fn, name, scale, 0, "num_kv_heads", num_kv_heads);
  check_contiguous(fn, name, scale);
  check_device(fn, name, scale, cache.device);
  if (!scale.device.is_cpu()) return;
  const float* s = scale.ptr<const float>();
  for (int64_t i = 0; i < num_kv_heads; ++i) {
    KVATTN_CHECK(std::isfinite(s[i]) && s[i] > 0.0f, fn, ": ", name, "[", i,
                 "] must be finite and > 0 but is ", s[i]);
  }
}

}  // namespace kvattn::detail
