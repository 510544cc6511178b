// Helpers of the CUDA op tests: moving host-built cases (views into one host allocation) to
// the device with the same byte layout, and the main() that skips (exit 77) without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"
#include "support/test_util.h"

namespace kvattn::test {

// A device copy of a host allocation; views into the host allocation map to the same offsets.
struct Mirror {
  Tensor host;    // the host allocation (kept alive for the views)
  Tensor device;  // same bytes on cuda:0

  static Mirror of(const Tensor& host_storage) {
    Mirror m;
    m.host = host_storage;
    m.device = host_storage.to(Device::cuda(0));
    return m;
  }
  // The device view at the same byte offset as `host_view` (a view into `host`).
  TensorView on_device(const TensorView& host_view) const {
    TensorView v = host_view;
    v.data = static_cast<char*>(device.data()) +
             (static_cast<const char*>(host_view.data) - static_cast<const char*>(host.data()));
    v.device = Device::cuda(0);
    return v;
  }
  // The host view at the offset of `device_view` inside a fresh download of the device bytes.
  Tensor download() const { return device.to(Device::cpu()); }
  TensorView in(const Tensor& downloaded, const TensorView& host_view) const {
    TensorView v = host_view;
    v.data = static_cast<char*>(downloaded.data()) +
             (static_cast<const char*>(host_view.data) - static_cast<const char*>(host.data()));
    return v;
  }
};

// True when the test binary runs with a reduced case list (compute-sanitizer runs):
// KVATTN_TEST_QUICK or KVATTN_GPU_TEST_QUICK set to anything but 0.
inline bool quick_mode() {
  for (const char* name : {"KVATTN_TEST_QUICK", "KVATTN_GPU_TEST_QUICK"}) {
    const char* q = std::getenv(name);
    if (q != nullptr && q[0] != '\0' && q[0] != '0') return true;
  }
  return false;
}

}  // namespace kvattn::test

// The GPU test binaries' main: exit 77 (ctest: skipped) when no CUDA device is visible.
#define KVATTN_GPU_TEST_MAIN()                                                       \
  int main(int argc, char** argv) {                                                  \
    if (!kvattn::cuda_available()) {                                                 \
      std::printf("no CUDA device visible: skipping the GPU tests\n");              \
      return kvattn::test::kSkipReturnCode;                                          \
    }                                                                                \
    ::testing::InitGoogleTest(&argc, argv);                                          \
    return RUN_ALL_TESTS();                                                          \
  }
