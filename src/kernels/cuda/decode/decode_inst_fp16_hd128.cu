// The decode kernels of fp16 queries over a fp16 cache at head_dim 128 (decode_host.h says why each
// family has a file of its own).
#include "kernels/cuda/decode/decode_launch.cuh"

namespace kvattn::cuda {
template struct DecodeKernels<__half, __half, 128>;
}  // namespace kvattn::cuda
