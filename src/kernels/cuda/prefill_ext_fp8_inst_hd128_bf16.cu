// Explicit instantiation: the extended prefill kernel (window, softcap, ALiBi; see
// prefill_kernel.cuh, kExt) on the 128-wide tile, bf16 queries over paged float8_e4m3 caches.
#include "kernels/cuda/prefill_kernel.cuh"

namespace kvattn::cuda {

template void launch_prefill_ext<__nv_bfloat16, 128, true, true>(const PrefillParams&,
                                                                 cudaStream_t);

}  // namespace kvattn::cuda
