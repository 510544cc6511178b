// The decode kernels of bf16 queries over a bf16 cache at head_dim 128 (decode_host.h says why each
// family has a file of its own).
#include "kernels/cuda/decode/decode_launch.cuh"

namespace kvattn::cuda {
template struct DecodeKernels<__nv_bfloat16, __nv_bfloat16, 128>;
}  // namespace kvattn::cuda
