// Raw allocation and copies on any Device. CUDA calls exist only when KVATTN_WITH_CUDA is set;
// otherwise asking for a CUDA device throws kvattn::Error.
#pragma once

#include <cstddef>

#include "kvattn/core/device.h"

namespace kvattn::detail {

void* device_malloc(std::size_t bytes, Device device);
void device_free(void* ptr, Device device) noexcept;
void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                   std::size_t bytes);
void device_memset(void* dst, Device device, int value, std::size_t bytes);

}  // namespace kvattn::detail
