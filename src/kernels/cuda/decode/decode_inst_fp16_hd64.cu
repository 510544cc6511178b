// The decode kernels of fp16 queries over a fp16 cache at head_dim 64 (decode_host.h says why each
// family has a file of its own).
#include "kernels/cuda/decode/decode_launch.cuh"

namespace kvattn::cuda {
template struct DecodeKernels<__half, __half, 64>;
}  // namespace kvattn::cuda
