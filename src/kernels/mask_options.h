// Internal: the sliding-window, softcap, ALiBi and cache_leftpad options shared by the prefill
// and decode entries (flash-attn's window_size, softcap, alibi_slopes and cache_leftpad;
// DESIGN §8).
#pragma once

#include <string_view>

#include "backend.h"

namespace kvattn::detail {

// Checks window_left/right (each >= -1) and softcap (finite, >= 0), rejects them on CUDA
// unless `cuda_ok` (the op's CUDA backend implements them: prefill and decode do) and
// stores the resolved values in `shape`: causal sets the right bound to 0, as flash-attn does.
void check_mask_options(std::string_view fn, int64_t window_left, int64_t window_right,
                        float softcap, bool causal, Device device, AttentionShape& shape,
                        bool cuda_ok = false);

// Optional alibi_slopes: on CUDA rejected first, whatever the tensor, unless `cuda_ok`.
// float32 [num_heads] or [num_seqs, num_heads] on q's device, last dim contiguous; on the CPU
// every value finite (on the GPU the values are not read on the host: that would sync). Call
// after the shape's num_seqs and num_heads are known.
void check_alibi_slopes(std::string_view fn, const TensorView& slopes, Device device,
                        const AttentionShape& shape, bool cuda_ok = false);

// Optional cache_leftpad (decode): int32 [num_seqs], contiguous, on q's device; on the CPU
// also 0 <= cache_leftpad[b] <= cache_seqlens[b] (on a GPU the values are not read on the
// host: the kernel clamps a bad one and records kFaultLeftpadOutOfRange).
void check_cache_leftpad(std::string_view fn, const TensorView& leftpad,
                         const TensorView& cache_seqlens, Device device, int64_t num_seqs);

}  // namespace kvattn::detail
