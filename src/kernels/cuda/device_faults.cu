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

// One allocation per device: the fault word, then (from byte kSlotsOffset) the prefill
// handover slots.
constexpr size_t kSlotsOffset = 256;
constexpr size_t kDeviceWordsBytes =
    kSlotsOffset + size_t{kPrefillHandoverSlots} * kPrefillHandoverSlotBytes;

char* device_words(int device, const char* who) {
  static std::mutex mu;
  static char* blocks[kMaxDevices] = {};
  KVATTN_CHECK(device >= 0 && device < kMaxDevices, who, ": device must be in [0, ",
               kMaxDevices, ") but is ", device);
  std::lock_guard<std::mutex> lock(mu);
  if (blocks[device] == nullptr) {
    int previous = 0;
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
    void* p = nullptr;
    check(cudaMalloc(&p, kDeviceWordsBytes), "cudaMalloc(fault word)");
    check(cudaMemset(p, 0, kDeviceWordsBytes), "cudaMemset(fault word)");
    check(cudaSetDevice(previous), "cudaSetDevice");
    blocks[device] = static_cast<char*>(p);
  }
  return blocks[device];
}

}  // namespace

uint32_t* fault_word_ptr(int device) {
  return reinterpret_cast<uint32_t*>(device_words(device, "fault_word_ptr"));
}

void* prefill_handover_slots(int device) {
  return device_words(device, "prefill_handover_slots") + kSlotsOffset;
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
