#include "kernels/cuda/device_props.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "kernels/cuda/cuda_check.h"

namespace kvattn::cuda {
namespace {

constexpr int kMaxDevices = 64;
using DeviceCache = std::array<std::atomic<int>, kMaxDevices>;

// cache[device], computed by read(device) on first use (0 means not yet read; every fact
// cached here is positive).
template <typename Read>
int cached(DeviceCache& cache, int device, const char* what, Read read) {
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, what, ": device must be in [0, ",
               kMaxDevices, ") but is ", device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = read(device);
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

int sm_count(int device) {
  static DeviceCache cache{};
  return cached(cache, device, "sm_count", [](int d) {
    int n = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
    return n;
  });
}

int compute_capability(int device) {
  static DeviceCache cache{};
  return cached(cache, device, "compute_capability", [](int d) {
    int major = 0;
    int minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
    return major * 10 + minor;
  });
}

int l2_cache_bytes(int device) {
  static DeviceCache cache{};
  return cached(cache, device, "l2_cache_bytes", [](int d) {
    // A hint only (the decode's L2 policy): an unreadable size is 1 byte, so every launch
    // keeps evict-first, rather than an error.
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, d) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n > 0 ? n : 1;  // the cache holds positive facts only
  });
}

}  // namespace kvattn::cuda
