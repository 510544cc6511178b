// Host side of TMA: building CUtensorMap descriptors (cuTensorMapEncodeTiled, reached through
// the runtime's driver entry point, so nothing links libcuda directly).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace kvattn::cuda {

// A tiled tensor map over 16-bit elements with the 128-byte swizzle, zero fill out of bounds.
// dims and box: innermost first (box[0] * 2 must be <= 128 bytes); strides: the byte strides of
// dims 1.. (multiples of 16). Throws kvattn::Error naming `what` if the driver refuses.
CUtensorMap make_tensor_map_2byte(const char* what, const void* base,
                                  std::initializer_list<uint64_t> dims,
                                  std::initializer_list<uint64_t> strides_bytes,
                                  std::initializer_list<uint32_t> box);

// The same without a swizzle: boxes land row after row, box[0] * 2 bytes each (a multiple of
// 16; box[0] <= 256), for kernels that read the rows as plain arrays.
CUtensorMap make_tensor_map_2byte_plain(const char* what, const void* base,
                                        std::initializer_list<uint64_t> dims,
                                        std::initializer_list<uint64_t> strides_bytes,
                                        std::initializer_list<uint32_t> box);

// The same over 1-byte elements (float8_e4m3 codes): box[0] <= 128.
CUtensorMap make_tensor_map_1byte(const char* what, const void* base,
                                  std::initializer_list<uint64_t> dims,
                                  std::initializer_list<uint64_t> strides_bytes,
                                  std::initializer_list<uint32_t> box);

// The same over elements of `elem_bytes` (1 or 2) bytes, or nothing where the driver refuses
// the map (or has no cuTensorMapEncodeTiled: CUDA_ERROR_NOT_SUPPORTED), the driver's answer
// in *result when given: for callers with another way to do the work.
std::optional<CUtensorMap> try_tensor_map(int elem_bytes, const void* base,
                                          std::initializer_list<uint64_t> dims,
                                          std::initializer_list<uint64_t> strides_bytes,
                                          std::initializer_list<uint32_t> box,
                                          CUresult* result = nullptr);

}  // namespace kvattn::cuda
