// Internal: kernel launches with programmatic dependent launch (PDL, sm_90+) or plainly. A PDL
// launch lets the kernel be scheduled while the previous kernel in the stream is still
// finishing; the kernel must execute ptx::grid_dependency_wait() (griddepcontrol.wait) before
// it reads what that kernel writes or writes what it reads, and may only read memory no
// preceding kernel is still writing before it. Without the attribute the wait returns at
// once, so a kernel written for PDL is also right when launched plainly. CUDA 12.3 is the first
// toolkit that captures PDL launches into graphs (as programmatic edges); with an older one
// every launch is plain.
#pragma once

#include <cuda_runtime_api.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12030
#define KVATTN_PDL_AVAILABLE 1
#else
#define KVATTN_PDL_AVAILABLE 0
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda {

// cudaLaunchKernelEx with the n attributes at attrs (launch errors throw, as
// CUDA_CHECK_LAUNCH, and are not left for the next check).
template <typename... Params, typename... Args>
void launch_kernel_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, cudaLaunchAttribute* attrs, unsigned n,
                      Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  (void)cudaGetLastError();
  CUDA_CHECK(e);
}

#if KVATTN_PDL_AVAILABLE
// The launch attribute that makes a launch programmatic (PDL).
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}
#endif

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-stream-serialization
// attribute when pdl (and the toolkit has it). Launch errors throw, as CUDA_CHECK_LAUNCH.
template <typename... Params, typename... Args>
void launch_maybe_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, bool pdl, Args&&... args) {
#if KVATTN_PDL_AVAILABLE
  if (pdl) {
    cudaLaunchAttribute attr[1] = {pdl_attribute()};
    launch_kernel_ex(kernel, grid, block, smem, stream, attr, 1, std::forward<Args>(args)...);
    return;
  }
#else
  (void)pdl;
#endif
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvattn::cuda
#endif  // __CUDACC__
