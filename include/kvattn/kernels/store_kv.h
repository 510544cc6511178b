// store_kv: writes each new token's K and V (all KV heads) into its slot of the paged cache.
#pragma once

#include "kvattn/core/tensor.h"

namespace kvattn {

// key, value:        [num_tokens, num_kv_heads, head_dim]; head_dim contiguous, head stride ==
//                    head_dim, any token stride (views into a fused QKV buffer are fine).
// k_cache, v_cache:  [num_blocks, block_size, num_kv_heads, head_dim], contiguous inside a
//                    block; the block stride may exceed one block (K and V in one allocation).
// slot_mapping:      int32 or int64 [n], n <= num_tokens. Token i goes to slot s =
//                    slot_mapping[i], i.e. block s / block_size, offset s % block_size.
//                    Negative slots are skipped (padding). Only the first n tokens are read.
//
// The copy is bit-exact when key/value/caches share one dtype. All tensors on one device.
// Out-of-range slots: on the CPU the call throws before writing anything; on the GPU the
// kernel skips them and records kFaultSlotOutOfRange in the device fault word.
//
// Caches of another dtype (CPU only, for now):
//   float8_e4m3: each element is quantised, stored = e4m3(sat(x / scale)) with the scale of
//                its KV head (fp8.h: round to nearest even, |x/scale| > 448 and +-Inf
//                saturate to +-448, NaN stays NaN). k_scale / v_scale: float32
//                [num_kv_heads], contiguous, on the cache's device, finite and > 0; an empty
//                view means 1.0. They are static: the same scales must be given to every
//                decode/prefill that reads the cache.
//   bfloat16 from float32 keys: rounded to nearest even.
// On CUDA a float8_e4m3 cache is rejected (no CUDA kernel yet); scales given for a cache that
// is not float8_e4m3 are rejected too.
void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping, Stream stream = {});
void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping,
              const TensorView& k_scale, const TensorView& v_scale, Stream stream = {});

}  // namespace kvattn
