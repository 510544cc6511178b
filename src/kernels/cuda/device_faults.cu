#include <cuda_runtime.h>

#include <mutex>

#include "kernels/backend.h"
#include "kernels/cuda/device_faults.cuh"

namespace kvattn::cuda {
namespace {

constexpr int kMaxDevices = 64;

void check(cudaError_t e, const char* what) {
  KVATTN_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

}  // namespace

uint32_t* fault_word_ptr(int device) {
  static std::mutex mu;
  static uint32_t* words[kMaxDevices] = {};
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, "fault_word_ptr: device must be in [0, ",
               kMaxDevices, ") but is ", device);
  std::lock_guard<std::mutex> lock(mu);
  if (words[device] == nullptr) {
    int previous = 0;
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
    uint32_t* p = nullptr;
    check(cudaMalloc(&p, sizeof(uint32_t)), "cudaMalloc(fault word)");
    check(cudaMemset(p, 0, sizeof(uint32_t)), "cudaMemset(fault word)");
    check(cudaSetDevice(previous), "cudaSetDevice");
    words[device] = p;
  }
  return words[device];
}

uint32_t read_device_faults(int device, bool clear) {
  uint32_t* word = fault_word_ptr(device);
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice");
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "read_device_faults: cudaDeviceSynchronize");
  uint32_t value = 0;
  check(cudaMemcpy(&value, word, sizeof(value), cudaMemcpyDeviceToHost), "cudaMemcpy(fault)");
  if (clear) check(cudaMemset(word, 0, sizeof(uint32_t)), "cudaMemset(fault word)");
  check(cudaSetDevice(previous), "cudaSetDevice");
  return value;
}

}  // namespace kvattn::cuda
