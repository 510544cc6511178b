// Internal: how the GPU model launches its own kernels, plainly or with programmatic dependent
// launch (PDL, sm_90+), so that one kernel's launch, CTA scheduling and prologue overlap the
// previous kernel's tail instead of following its drain (issue 20: ~256 small dependent
// kernels per decode token). Every wrapper of cuda_kernels.h, cuda_gemma.h, cuda_rope_kv.h,
// cuda_sampling.h and cuda_gemv.h takes a Launch; a bare cudaStream_t converts to a plain one,
// so callers that do not care (tests, tools) read as before.
//
// The contract, for every kernel launched through launch_kernel:
// - It calls pdl_enter() first, before any global read or write and before any early return:
//   griddepcontrol.wait, then griddepcontrol.launch_dependents. The wait blocks until the
//   previous grid in the stream has *completed* and its writes are visible (not merely
//   triggered), so reads of its output and writes to buffers it still reads are both safe;
//   without the attribute it returns at once. The wait is unconditional, so a PDL kernel never
//   completes before its predecessor has, and the guarantee chains: the kernel after it that
//   waits on its completion also sees everything before it. The one exception: memory that no
//   kernel of a step writes (weights) may be touched before the wait; the GEMV asks L2 for its
//   first weight tile there (cuda_gemv.h), and the norm-fused GEMVs and the q/k norm + RoPE
//   token kernel load their norm weights there, so that those DRAM round trips overlap the
//   previous kernel.
// - The trigger right after the wait (our rule): the dependent grid may be scheduled as soon as
//   every CTA of this grid has started running (after its own wait). Nothing the dependent
//   reads is promised by the trigger, only its scheduling: the dependent's CTAs take SM slots
//   that this grid no longer needs (all its CTAs are resident or done) and sit at their own
//   wait. Triggering after the wait, not before, keeps at most two grids in flight, the
//   running one and the next, never a chain of waiting grids holding SMs.
// Kernels we do not own (prefill, cuBLASLt's GEMMs, NCCL; the decode attention with
// KVATTN_DECODE_PDL=0, else DecodeArgs::pdl) keep their plain launches: a plain launch waits for
// full completion of what precedes it, and a PDL kernel of ours after one of them still
// waits in pdl_enter (a grid that never triggers lets the dependent start at its completion),
// so every mix is correct; the overlap only happens on the edges between two of ours (GEMV ->
// norm, norm -> ..., SiLU -> GEMV).
//
// CUDA graphs: captured PDL launches become programmatic edges (CUDA 12.3+); with an older
// toolkit launch_kernel always launches plainly and pdl_supported() is false. A PDL launch
// whose predecessor in the stream is not a kernel (a copy, an event) has an ordinary
// dependency on it. Default: on where pdl_supported() (ModelOptions::pdl, since session 12
// ran it on the H200); KVATTN_PDL=0 turns it off, =1 on (CudaModelStats::pdl reports it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/pdl_launch.h"  // KVATTN_PDL_AVAILABLE, launch_kernel_ex, launch_maybe_pdl

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ptx.cuh"
#endif

namespace kvattn::cuda_model {

// The stream a wrapper launches on, and whether its kernel gets the PDL attribute.
struct Launch {
  Launch(cudaStream_t s, bool programmatic = false)  // NOLINT: a stream is a plain Launch
      : stream(s), pdl(programmatic) {}
  cudaStream_t stream;
  bool pdl;
};

// Whether `device` can take PDL launches: built with CUDA 12.3+, a 12.3+ driver, compute
// capability 9.0+.
inline bool pdl_supported(int device) {
  if (!KVATTN_PDL_AVAILABLE) return false;
  int driver = 0, major = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver < 12030) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;
}

// KVATTN_PDL=1 / =0 overrides the option either way (bench and tests compare the two);
// unset or any other value: the option decides.
inline bool pdl_wanted(bool option) {
  const char* e = std::getenv("KVATTN_PDL");
  if (e != nullptr && std::strcmp(e, "0") == 0) return false;
  if (e != nullptr && std::strcmp(e, "1") == 0) return true;
  return option;
}

#ifdef __CUDACC__

// The first statement of every kernel launched through launch_kernel (the contract above).
__device__ __forceinline__ void pdl_enter() {
  cuda::ptx::grid_dependency_wait();
  cuda::ptx::grid_launch_dependents();
}

using cuda::launch_kernel_ex;

// launch_kernel in thread block clusters of cluster_x CTAs along x (sm_90+; gridDim.x a
// multiple of cluster_x), with the PDL attribute as launch_kernel when on.pdl.
template <typename... Params, typename... Args>
void launch_kernel_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                            Launch on, unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  attr[n].id = cudaLaunchAttributeClusterDimension;
  attr[n].val.clusterDim.x = cluster_x;
  attr[n].val.clusterDim.y = 1;
  attr[n].val.clusterDim.z = 1;
  ++n;
#if KVATTN_PDL_AVAILABLE
  if (on.pdl) attr[n++] = cuda::pdl_attribute();
#endif
  launch_kernel_ex(kernel, grid, block, smem, on.stream, attr, n, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, on.stream>>>(args...), with the programmatic-stream-serialization
// attribute when on.pdl (and the toolkit has it). Launch errors throw, as CUDA_CHECK_LAUNCH.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Launch on,
                   Args&&... args) {
  cuda::launch_maybe_pdl(kernel, grid, block, smem, on.stream, on.pdl,
                         std::forward<Args>(args)...);
}

#endif  // __CUDACC__

}  // namespace kvattn::cuda_model
