// The decode kernels of bf16 queries over a float8_e4m3 cache at head_dim 256 (decode_host.h says
// why each family has a file of its own).
#include "kernels/cuda/decode/decode_launch.cuh"

namespace kvattn::cuda {
template struct DecodeKernels<__nv_bfloat16, uint8_t, 256>;
}  // namespace kvattn::cuda
