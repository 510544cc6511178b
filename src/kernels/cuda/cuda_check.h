// CUDA error checks for the CUDA backend. Every failure throws kvattn::Error naming the call
// and the CUDA error, with the file:line of the check (KVATTN_CHECK appends it).
//   CUDA_CHECK(cudaMemcpyAsync(...));
//   kernel<<<grid, block, smem, stream>>>(params);
//   CUDA_CHECK_LAUNCH();   // launch-configuration errors (bad grid, too much smem, ...)
#pragma once

#include <cuda_runtime_api.h>

#include "kvattn/core/error.h"

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t kvattn_cuda_err_ = (expr);                                          \
    KVATTN_CHECK(kvattn_cuda_err_ == cudaSuccess, #expr, " failed: ",                     \
                 cudaGetErrorName(kvattn_cuda_err_), " (",                                \
                 cudaGetErrorString(kvattn_cuda_err_), ")");                              \
  } while (0)

// After a <<<...>>> launch: reports (and clears) a launch error without synchronizing.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace kvattn::cuda {

// Makes `device` current for the scope and restores the previous device after. Host-only and
// capture-safe (cudaGetDevice/cudaSetDevice enqueue nothing).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

}  // namespace kvattn::cuda
