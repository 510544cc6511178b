// Internal: fp8 KV-cache calibration on the GPU (Model::track_kv_amax): the largest |k| and
// |v| of a step's rows per KV head, folded into running maxima on the device, as
// cpu_model::KvScales::record does on the CPU (NaN ignored, +-Inf recorded as +Inf).
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cstdint>

#include "engine/model/cuda_launch.h"

namespace kvattn::cuda_model {

// k_amax[h] = max(k_amax[h], max |k[t * ld + h * head_dim + x]|) over t < tokens, x < head_dim,
// for h < num_kv_heads; the same for v and v_amax. k and v are bf16 rows (the qkv buffer's K
// and V columns after the q/k norm and RoPE: what the cache stores before quantisation);
// k_amax and v_amax float32 [num_kv_heads] on the device, holding values >= 0 (zero them to
// start). Launches one kernel; nothing for tokens == 0. Not graph-captured by the model (it
// runs on eager steps only, while calibrating).
void kv_amax_record(const void* k, const void* v, int64_t ld, int64_t tokens,
                    int64_t num_kv_heads, int64_t head_dim, float* k_amax, float* v_amax,
                    Launch on);

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
