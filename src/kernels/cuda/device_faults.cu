#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cuda/device_faults.cuh"

namespace kvattn::cuda {
namespace {

constexpr int kMaxDevices = 64;

void check(cudaError_t e, const char* what) {
  KVATTN_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

// One allocation per device: the fault word, then (from byte kSlotsOffset) the prefill
// handover slots, then (from kCountersOffset) the prefill tile counters.
constexpr size_t kSlotsOffset = 256;
constexpr size_t kCountersOffset =
    kSlotsOffset + size_t{kPrefillHandoverSlots} * kPrefillHandoverSlotBytes;
constexpr size_t kDeviceWordsBytes = kCountersOffset + size_t{kPrefillTileCounters} * 8;

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

uint32_t* prefill_tile_counter(int device, cudaStream_t stream) {
  uint32_t* counters = reinterpret_cast<uint32_t*>(
      device_words(device, "prefill_tile_counter") + kCountersOffset);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, int> by_stream;
  static int stream_used[kMaxDevices] = {};
  static int captured_used[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (capture != cudaStreamCaptureStatusNone) {  // a pair of its own for good
    constexpr int kCaptured = kPrefillTileCounters - kPrefillStreamTileCounters;
    if (captured_used[device] >= kCaptured) return nullptr;
    return counters + 2 * (kPrefillStreamTileCounters + captured_used[device]++);
  }
  const auto key = std::make_pair(device, stream);
  const auto it = by_stream.find(key);
  if (it != by_stream.end()) return counters + 2 * it->second;
  if (stream_used[device] >= kPrefillStreamTileCounters) return nullptr;
  const int index = stream_used[device]++;
  by_stream.emplace(key, index);
  return counters + 2 * index;
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
