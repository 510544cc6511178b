// Raising a kernel's dynamic shared-memory limit (above 48 KB a launch needs
// cudaFuncSetAttribute first), once per device and kernel.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kvattn/core/error.h"

namespace kvattn::cuda {

// Raises `kernel`'s limit to `bytes` on the current device unless bit d of `raised` (one
// static per kernel instantiation) says it was done for device d; returns the device.
template <typename Kernel>
int raise_smem_limit_once(Kernel kernel, int bytes, std::atomic<uint64_t>& raised,
                          const char* fn) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  KVATTN_CHECK(err == cudaSuccess, fn, ": cudaGetDevice failed: ", cudaGetErrorString(err));
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit == 0 || (raised.load(std::memory_order_relaxed) & bit) == 0) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    KVATTN_CHECK(err == cudaSuccess, fn, ": cudaFuncSetAttribute(", bytes,
                 " bytes of shared memory) failed: ", cudaGetErrorString(err));
    raised.fetch_or(bit, std::memory_order_relaxed);
  }
  return device;
}

}  // namespace kvattn::cuda
