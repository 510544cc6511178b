// Internal: the Hopper prefill path. prefill_attention.cu asks prefill_sm90_eligible() and then
// launches either this kernel family or the sm_80 one (prefill_launch.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/prefill_params.h"

namespace kvattn::cuda {

// True when the sm_90a kernels were compiled in (KVATTN_SM90A), `device` is compute capability
// 9.0, the switch CudaTuning::prefill_sm90 is on, p.head_dim is 64, 128 or 256, and the call
// fits the kernel: packed K/V, or a page size that is a multiple of the key tile (128 keys; 64
// at head_dim 256) or a divisor of it of at least 8 keys (a TMA box is whole 8-row swizzle
// atoms of one page), or any page size with the experimental cp.async gather
// (CudaTuning::prefill_sm90_paged_gather; 128-key tiles only, not with `mods`).
// `mods`: the call has a window, softcap or ALiBi (launch_prefill_sm90_mods). Everything else
// runs on the sm_80 kernels.
bool prefill_sm90_eligible(const PrefillParams& p, bool paged, int device, bool mods = false);

// T: __nv_bfloat16 or __half; kHeadDim: 64, 128 or 256. Builds the tensor maps and launches on
// the current device. Instantiated in prefill_sm90_inst_*.cu.
template <typename T, int kHeadDim, bool kCausal, bool kPaged>
void launch_prefill_sm90(const PrefillParams& p, cudaStream_t stream);

// The same kernel with flash-attn's window_size, softcap and ALiBi (p.window_left/right,
// softcap_in/out, alibi_slopes: prefill_params.h; causal is p.window_right = 0), as the sm_80
// ext kernel computes them (prefill_mask.cuh). Instantiated in prefill_sm90_mods_inst_*.cu.
template <typename T, int kHeadDim, bool kPaged>
void launch_prefill_sm90_mods(const PrefillParams& p, cudaStream_t stream);

}  // namespace kvattn::cuda
