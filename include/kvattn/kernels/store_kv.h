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
// The copy is bit-exact; key/value/caches share one dtype. All tensors on one device.
// Out-of-range slots: on the CPU the call throws before writing anything; on the GPU the
// kernel skips them and records kFaultSlotOutOfRange in the device fault word.
void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping, Stream stream = {});

}  // namespace kvattn
