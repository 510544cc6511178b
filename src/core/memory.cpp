#include "memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kvattn/core/error.h"

#ifdef KVATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#define KVATTN_CUDA_CALL(expr)                                                       \
  do {                                                                               \
    cudaError_t kvattn_err_ = (expr);                                                \
    KVATTN_CHECK(kvattn_err_ == cudaSuccess, #expr, " failed: ",                     \
                 cudaGetErrorString(kvattn_err_));                                   \
  } while (0)
#endif

namespace kvattn {

bool cuda_available() {
#ifdef KVATTN_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
#else
  return false;
#endif
}

namespace detail {
namespace {

// Host buffers of at least this many bytes are aligned to it and asked for transparent huge
// pages (Linux, THP in "madvise" mode as well as "always"): a paged KV cache reads each KV
// head's rows num_kv_heads * head_dim elements apart (4 KiB for 8 float heads of 128), so a
// key tile touches one 4 KiB page a row and misses the TLB on most of them.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

void* host_malloc(std::size_t bytes) {
  const std::size_t align = bytes >= kHugePage ? kHugePage : 64;
  KVATTN_CHECK(bytes <= SIZE_MAX - align, "Tensor::empty: cannot allocate ", bytes,
               " bytes on cpu");
  const std::size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  KVATTN_CHECK(p != nullptr, "Tensor::empty: cannot allocate ", bytes, " bytes on cpu");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);  // a hint: failure is fine
#endif
  return p;
}

}  // namespace

void* device_malloc(std::size_t bytes, Device device) {
  if (bytes == 0) bytes = 1;  // keep every defined tensor non-null
  if (device.is_cpu()) return host_malloc(bytes);
#ifdef KVATTN_WITH_CUDA
  KVATTN_CUDA_CALL(cudaSetDevice(device.index));
  void* p = nullptr;
  KVATTN_CUDA_CALL(cudaMalloc(&p, bytes));
  return p;
#else
  KVATTN_FAIL("Tensor: device is ", device, " but this build of kvattn has no CUDA backend");
#endif
}

void device_free(void* ptr, Device device) noexcept {
  if (device.is_cpu()) {
    std::free(ptr);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  cudaFree(ptr);
#endif
}

void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                   std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  KVATTN_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  KVATTN_FAIL("copy: a ", (dst_device.is_cpu() ? src_device : dst_device),
              " tensor needs the CUDA backend, which this build lacks");
#endif
}

void device_memset(void* dst, Device device, int value, std::size_t bytes) {
  if (device.is_cpu()) {
    std::memset(dst, value, bytes);
    return;
  }
#ifdef KVATTN_WITH_CUDA
  KVATTN_CUDA_CALL(cudaMemset(dst, value, bytes));
#else
  KVATTN_FAIL("memset: device ", device, " needs the CUDA backend, which this build lacks");
#endif
}

}  // namespace detail
}  // namespace kvattn
