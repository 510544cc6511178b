// Hopper prefill kernels with window / softcap / ALiBi (kMods) for head_dim 256, fp16: packed and
// paged (one file per head_dim and dtype so builds parallelise).
#include "kernels/cuda/hopper/prefill_sm90_launch.cuh"

namespace kvattn::cuda {

template void launch_prefill_sm90_mods<__half, 256, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_sm90_mods<__half, 256, true>(const PrefillParams&, cudaStream_t);

}  // namespace kvattn::cuda
