// Where a tensor's bytes live, and the stream a GPU op runs on.
#pragma once

#include <ostream>

namespace kvattn {

enum class DeviceKind : unsigned char { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::kCUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCPU; }
  bool is_cuda() const { return kind == DeviceKind::kCUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

// A CUDA stream handle (cudaStream_t) carried opaquely so that host-only code needs no CUDA
// headers. The null handle is the legacy default stream. Ignored by CPU ops.
struct Stream {
  void* handle = nullptr;
};

// True when this build has the CUDA backend and a device is visible.
bool cuda_available();

}  // namespace kvattn
