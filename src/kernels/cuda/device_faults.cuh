// The device fault word, shared by every kvattn kernel (store_kv, decode, prefill).
//
// Kernels never check index values on the host (that would sync). A kernel that meets a bad
// slot, block id or length skips that work and ORs a DeviceFault bit into a 32-bit word that
// lives in device memory, one word per device, allocated on first use. The word's pointer is
// passed to kernels in their params struct (separable compilation is off, so an extern
// __device__ variable could not be shared across .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kvattn/kernels/device_faults.h"

namespace kvattn::cuda {

// The fault word of `device` (cudaMalloc'ed and zeroed once; never freed). Host function;
// must not be called during CUDA-graph capture for the first time on a device.
uint32_t* fault_word_ptr(int device);

// The Hopper prefill's tile-handover slots of `device` (prefill_sm90_tile_handover.cuh):
// kPrefillHandoverSlots of kPrefillHandoverSlotBytes, one per SM id. They share the fault
// word's allocation (made on the first use of either), so any kvattn kernel that ran before a
// CUDA-graph capture has allocated them too. Host function.
inline constexpr int kPrefillHandoverSlots = 1024;
inline constexpr int kPrefillHandoverSlotBytes = 64;
void* prefill_handover_slots(int device);

// The Hopper prefill's tile counters (prefill_sm90_schedule.cuh, for_each_claimed_tile): pairs
// of 32-bit words {next ticket, CTAs done}, zero between launches (the last CTA of a launch
// resets its pair), in the same allocation. A launch's pair must not be in use by another
// launch running at the same time, so pairs are handed out per stream for launches outside a
// CUDA-graph capture (launches on one stream run in order; the prefill kernels take no PDL) and
// one per launch inside a capture (a graph's replays run in order with each other). Returns
// nullptr when none is left (the launch then takes the static schedule). Host function; the
// first call on a device must not happen during a capture (as fault_word_ptr).
inline constexpr int kPrefillTileCounters = 4096;
inline constexpr int kPrefillStreamTileCounters = 256;  // of them, for uncaptured streams
uint32_t* prefill_tile_counter(int device, cudaStream_t stream);

#ifdef __CUDACC__
__device__ __forceinline__ void record_fault(uint32_t* word, uint32_t bits) {
  if (word != nullptr) atomicOr(word, bits);
}
#endif

}  // namespace kvattn::cuda
