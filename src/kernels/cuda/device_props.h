// Per-device facts the launchers size their grids from, read once per device and cached.
#pragma once

namespace kvattn::cuda {

// Number of streaming multiprocessors of `device` (cudaGetDeviceProperties, cached).
int sm_count(int device);

// Compute capability of `device` as major * 10 + minor (90 for Hopper), cached.
int compute_capability(int device);

}  // namespace kvattn::cuda
