#include "kernels/cuda/device_props.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda {

int sm_count(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "sm_count: device must be in [0, ",
               kMaxDevices, ") but is ", device);
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    n = prop.multiProcessorCount;
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

int compute_capability(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "compute_capability: device must be in [0, ",
               kMaxDevices, ") but is ", device);
  int cc = cache[device].load(std::memory_order_relaxed);
  if (cc == 0) {
    int major = 0;
    int minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    cc = major * 10 + minor;
    cache[device].store(cc, std::memory_order_relaxed);
  }
  return cc;
}

}  // namespace kvattn::cuda
