// Internal: checks of a KV cache's dtype and of the fp8 dequantisation scales, shared by the
// store_kv, prefill and decode entries. Failures throw kvattn::Error naming the argument with
// the expected and the actual value.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvattn/core/tensor.h"

namespace kvattn::detail {

// `cache` may hold `src` (the dtype of the key written into it, or of q reading it), or
// float8_e4m3 (on CUDA for bfloat16/float16 src only), or, on the CPU, bfloat16 for float32
// src. Anything else names `src_name` as the dtype it had to match.
void check_cache_dtype(std::string_view fn, std::string_view name, const TensorView& cache,
                       DType src, std::string_view src_name);

// An fp8 scale (k_scale or v_scale) for `cache`: empty (means 1.0), or float32
// [num_kv_heads], contiguous, on the cache's device; on the CPU every value finite and > 0.
// Given for a cache that is not float8_e4m3, it is an error.
void check_kv_scale(std::string_view fn, std::string_view name, const TensorView& scale,
                    std::string_view cache_name, const TensorView& cache, int64_t num_kv_heads);

}  // namespace kvattn::detail
