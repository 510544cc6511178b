// The device fault word: GPU kernels never check index tensors on the host (that would sync),
// so they skip bad entries and OR a fault bit into a per-device word instead.
#pragma once

#include <cstdint>

#include "kvattn/core/device.h"

namespace kvattn {

enum DeviceFault : uint32_t {
  kFaultNone = 0,
  kFaultSlotOutOfRange = 1u << 0,     // store_kv: slot >= num_blocks * block_size
  kFaultBlockOutOfRange = 1u << 1,    // a block_table entry outside [0, num_blocks)
  kFaultSeqlenOutOfRange = 1u << 2,   // cache_seqlens / Lk beyond the block table's capacity
  kFaultBadCuSeqlens = 1u << 3,       // cu_seqlens not non-decreasing or past the tensor
  kFaultDecodeMergeStalled = 1u << 4, // decode: a split's piece never reached its merger (or a
                                      // dynamic split's claim never saw its launch's counter)
  kFaultLeftpadOutOfRange = 1u << 5,  // decode: cache_leftpad[b] outside [0, cache_seqlens[b]]
};

// Reads (and by default clears) the fault word of `device`. Synchronizes that device.
// Always 0 on the CPU, where the same faults throw kvattn::Error instead.
uint32_t read_device_faults(Device device, bool clear = true);

}  // namespace kvattn
