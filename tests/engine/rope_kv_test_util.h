// Shared by the GPU tests of the q/k norm + RoPE + KV write (fused_rope_kv_gpu_test) and of the
// qkv GEMV that runs it as its epilogue (gemv_rope_kv_gpu_test): host <-> device copies, the
// paged K and V caches as views of one buffer, and the RoPE parameters both tests use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/model/cuda_rope_kv.h"
#include "kvattn/core/device.h"
#include "kvattn/core/tensor.h"

namespace kvattn::test {

// A device copy of v (one element when v is empty, so the tensor has storage).
template <typename T>
Tensor upload(const std::vector<T>& v, DType dt) {
  Tensor h = Tensor::empty({static_cast<int64_t>(std::max<size_t>(v.size(), 1))}, dt);
  if (!v.empty()) std::memcpy(h.data(), v.data(), v.size() * sizeof(T));
  return h.to(Device::cuda(0));
}

// The first n elements of d.
template <typename T>
std::vector<T> download(const Tensor& d, size_t n) {
  Tensor h = d.to(Device::cpu());
  std::vector<T> v(n);
  std::memcpy(v.data(), h.data(), n * sizeof(T));
  return v;
}

// K and V caches [num_blocks, block_size, kv_heads, head_dim] of type dt (elem bytes) in one
// buffer laid out [num_blocks, 2 (K, V), block_size, kv_heads, head_dim]: a block stride of
// two blocks, so a wrong stride shows.
struct PagedKV {
  TensorView k, v;
};
inline PagedKV paged_kv_views(void* base, DType dt, int64_t elem, int64_t num_blocks,
                              int64_t block_size, int64_t kv_heads, int64_t head_dim) {
  const int64_t block = block_size * kv_heads * head_dim;  // elements
  const std::vector<int64_t> shape = {num_blocks, block_size, kv_heads, head_dim};
  const std::vector<int64_t> strides = {2 * block, kv_heads * head_dim, head_dim, 1};
  char* b = static_cast<char*>(base);
  return {TensorView(b, dt, Device::cuda(0), shape, strides),
          TensorView(b + block * elem, dt, Device::cuda(0), shape, strides)};
}

// Plain RoPE at theta 1e6 with eps 1e-6 over `tokens` rows of qkv (stride ld); q_norm / k_norm
// null for none.
inline cuda_model::QkNormRope test_rope(void* qkv, int64_t ld, int64_t tokens, int64_t heads,
                                        int64_t kv_heads, int64_t head_dim, const void* q_norm,
                                        const void* k_norm, const int32_t* positions,
                                        bool interleaved, int64_t rotary_dim = 0) {
  cuda_model::QkNormRope p;
  p.qkv = qkv;
  p.ld = ld;
  p.tokens = tokens;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  p.q_norm = q_norm;
  p.k_norm = k_norm;
  p.eps = 1e-6f;
  p.positions = positions;
  p.theta = 1000000.0f;
  p.interleaved = interleaved;
  return p;
}

}  // namespace kvattn::test
