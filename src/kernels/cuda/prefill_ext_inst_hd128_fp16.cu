// Explicit instantiations: the extended prefill kernels (window, softcap, ALiBi; see
// prefill_kernel.cuh, kExt) on the 128-wide tile, fp16, packed and paged.
#include "kernels/cuda/prefill_kernel.cuh"

namespace kvattn::cuda {

template void launch_prefill_ext<__half, 128, false>(const PrefillParams&, cudaStream_t);
template void launch_prefill_ext<__half, 128, true>(const PrefillParams&, cudaStream_t);

}  // namespace kvattn::cuda
