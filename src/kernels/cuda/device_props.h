// Per-device facts the launchers size their grids from, read once per device and cached.
#pragma once

namespace kvattn::cuda {

// Number of streaming multiprocessors of `device` (cudaGetDeviceProperties, cached).
int sm_count(int device);

}  // namespace kvattn::cuda
