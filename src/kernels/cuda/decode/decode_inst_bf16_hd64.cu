// The decode kernels of bf16 queries over a bf16 cache at head_dim 64 (decode_host.h says why each
// family has a file of its own).
#include "kernels/cuda/decode/decode_launch.cuh"

namespace kvattn::cuda {
template struct DecodeKernels<__nv_bfloat16, __nv_bfloat16, 64>;
}  // namespace kvattn::cuda
