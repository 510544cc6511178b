// Explicit instantiations: prefill kernels for head_dim 64, fp16 (causal x paged, and paged over float8_e4m3 caches).
#include "kernels/cuda/prefill_kernel.cuh"

namespace kvattn::cuda {

template void launch_prefill<__half, 64, false, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill<__half, 64, false, true>(const PrefillParams&, cudaStream_t);
template void launch_prefill<__half, 64, true, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill<__half, 64, true, true>(const PrefillParams&, cudaStream_t);
template void launch_prefill<__half, 64, false, true, true>(const PrefillParams&, cudaStream_t);
template void launch_prefill<__half, 64, true, true, true>(const PrefillParams&, cudaStream_t);

}  // namespace kvattn::cuda
