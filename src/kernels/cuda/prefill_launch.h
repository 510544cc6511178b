// Internal: the compiled prefill configurations. One explicit instantiation file per
// (dtype, head_dim) pair (prefill_inst_*.cu) holds the four causal x paged kernels, and one per
// (dtype, tile head_dim) the two extended ones (prefill_ext_inst_*.cu), so the builds
// parallelise; prefill_attention.cu is the single dispatch point over them.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/prefill_params.h"

namespace kvattn::cuda {

// The parameter block for validated arguments (the entry checked shapes, dtypes and strides);
// throws kvattn::Error for what the kernels cannot run (head_dim other than 64/80/96/128/256,
// pointers or strides not multiples of 16 bytes). num_m_blocks is left for the launcher.
PrefillParams make_prefill_params(const PrefillArgs& args, const AttentionShape& shape);

// T: __nv_bfloat16 or __half. kHeadDim: 64 or 128. kFp8 (paged only): float8_e4m3 caches.
// Launches on the current device.
template <typename T, int kHeadDim, bool kCausal, bool kPaged, bool kFp8 = false>
void launch_prefill(const PrefillParams& p, cudaStream_t stream);

// The extended kernels (prefill_kernel.cuh, kExt): window (causal = right bound 0), softcap,
// ALiBi, and p.head_dim <= kTileDim (64: 64; 128: 80, 96, 128; 256: 256). kFp8 (paged only):
// float8_e4m3 caches. Instantiated by prefill_ext_inst_*.cu (16-bit K/V) and
// prefill_ext_fp8_inst_*.cu (fp8).
template <typename T, int kTileDim, bool kPaged, bool kFp8 = false>
void launch_prefill_ext(const PrefillParams& p, cudaStream_t stream);

}  // namespace kvattn::cuda
