// Per-device facts the launchers size their grids from, read once per device and cached.
#pragma once

namespace kvattn::cuda {

// Number of streaming multiprocessors of `device` (cudaGetDeviceProperties, cached).
int sm_count(int device);

// Compute capability of `device` as major * 10 + minor (90 for Hopper), cached.
int compute_capability(int device);

// Bytes of `device`'s L2 cache (cudaDevAttrL2CacheSize), cached; 1 when it cannot be read
// (callers use it as a hint).
int l2_cache_bytes(int device);

}  // namespace kvattn::cuda
