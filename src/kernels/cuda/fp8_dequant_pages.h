// Internal (CUDA builds): a paged float8_e4m3 K or V cache's first keys, dequantized into a
// packed 16-bit tensor, so a kernel that reads only 16-bit K/V can serve them (the cascade
// decode's shared-prefix pass: attention.cpp).
#pragma once

#include <cstdint>

#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"

namespace kvattn::cuda {

// out[j, h, :] = cache[block_table[j / bs], j % bs, h, :] * scale[h] for keys j < num_keys:
// cache float8_e4m3 [num_blocks, bs, num_kv_heads, head_dim] (each block contiguous, blocks
// at any stride), block_table int32 [>= ceil(num_keys / bs)] on the device, scale float32
// [num_kv_heads] or undefined (1), out bf16 or fp16 [num_keys, num_kv_heads, head_dim]
// contiguous. Codes convert exactly (the NaN codes read +-480, as the attention kernels read
// them); the product rounds once to out's dtype, so scale 1 copies the values exactly. Block
// ids outside [0, num_blocks) give zero rows (never read). head_dim a multiple of 8.
// Asynchronous on `stream`; no allocation.
void dequant_fp8_pages(const TensorView& cache, const TensorView& block_table, int64_t num_keys,
                       const TensorView& scale, const TensorView& out, Stream stream);

}  // namespace kvattn::cuda
