// Hopper prefill kernels for head_dim 256, fp16: causal x paged (one file per pair so builds
// parallelise).
#include "kernels/cuda/hopper/prefill_sm90_launch.cuh"

namespace kvattn::cuda {

template void launch_prefill_sm90<__half, 256, false, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_sm90<__half, 256, false, true>(const PrefillParams&, cudaStream_t);
template void launch_prefill_sm90<__half, 256, true, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_sm90<__half, 256, true, true>(const PrefillParams&, cudaStream_t);

}  // namespace kvattn::cuda
