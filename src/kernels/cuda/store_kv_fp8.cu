// store_kv into a float8_e4m3 cache on the GPU: each element of a new token's K and V row is
// quantised with the scale of its KV head by quantize_e4m3 (fp8_quantize.cuh: bit-exactly as
// the CPU backend's quantize_e4m3; the engine's fused KV write uses the same function).
//
// One thread per group of 8 elements of a row (one 16-byte load of bf16/fp16, one 8-byte
// store) when every address and stride allows it and head_dim is a multiple of 8; otherwise
// one thread per element. Slots follow store_kv.cu: negative ones are skipped, ones past the
// cache are recorded in the fault word and skipped.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/fp8_quantize.cuh"

namespace kvattn::cuda {
namespace {

struct StoreFp8Params {
  const void* key;
  const void* value;
  uint8_t* k_cache;
  uint8_t* v_cache;
  const float* k_scale;  // [num_kv_heads] or null (1.0)
  const float* v_scale;
  const void* slot_mapping;
  int64_t slot_stride;   // elements
  int64_t num_tokens;
  int64_t key_stride;    // elements
  int64_t value_stride;  // elements
  int64_t k_block_stride;  // bytes (= elements)
  int64_t v_block_stride;
  int64_t block_size;
  int64_t num_slots;
  int head_dim;
  int row_elems;         // num_kv_heads * head_dim
  uint32_t* fault_word;
};

// Byte offset of the slot's row in k_cache (v_offset: in v_cache); -1 to skip it.
template <typename Slot>
__device__ __forceinline__ int64_t slot_offset(const StoreFp8Params& p, int64_t token,
                                               bool report, int64_t& v_offset) {
  const int64_t slot = static_cast<int64_t>(static_cast<const Slot*>(p.slot_mapping)[token * p.slot_stride]);
  if (slot < 0) return -1;
  if (slot >= p.num_slots) {
    if (report) record_fault(p.fault_word, kFaultSlotOutOfRange);
    return -1;
  }
  const int64_t block = slot / p.block_size;
  const int64_t in_block = (slot - block * p.block_size) * p.row_elems;
  v_offset = block * p.v_block_stride + in_block;
  return block * p.k_block_stride + in_block;
}

// Thread i: group (token i / groups, group i % groups) of kPer elements (kPer = 8: vectors).
template <typename T, typename Slot, int kPer>
__global__ void __launch_bounds__(256) store_kv_fp8_kernel(const __grid_constant__ StoreFp8Params p) {
  const int groups = p.row_elems / kPer;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t token = i / groups;
  if (token >= p.num_tokens) return;
  const int e0 = static_cast<int>(i - token * groups) * kPer;
  const int head = e0 / p.head_dim;
  const T* ksrc = static_cast<const T*>(p.key) + token * p.key_stride + e0;
  const T* vsrc = static_cast<const T*>(p.value) + token * p.value_stride + e0;
  int64_t voff = 0;
  const int64_t koff = slot_offset<Slot>(p, token, e0 == 0, voff);
  if (koff < 0) return;
  const float ks = p.k_scale != nullptr ? __ldg(p.k_scale + head) : 1.0f;
  const float vs = p.v_scale != nullptr ? __ldg(p.v_scale + head) : 1.0f;
  if constexpr (kPer == 8) {
    static_assert(sizeof(T) == 2);
    const uint4 kw = *reinterpret_cast<const uint4*>(ksrc);
    const uint4 vw = *reinterpret_cast<const uint4*>(vsrc);
    const T* kx = reinterpret_cast<const T*>(&kw);
    const T* vx = reinterpret_cast<const T*>(&vw);
    uint32_t kq[2] = {0, 0}, vq[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      kq[j / 4] |= static_cast<uint32_t>(quantize_e4m3(kx[j], ks)) << (8 * (j % 4));
      vq[j / 4] |= static_cast<uint32_t>(quantize_e4m3(vx[j], vs)) << (8 * (j % 4));
    }
    *reinterpret_cast<uint2*>(p.k_cache + koff + e0) = make_uint2(kq[0], kq[1]);
    *reinterpret_cast<uint2*>(p.v_cache + voff + e0) = make_uint2(vq[0], vq[1]);
  } else {
    p.k_cache[koff + e0] = quantize_e4m3(*ksrc, ks);
    p.v_cache[voff + e0] = quantize_e4m3(*vsrc, vs);
  }
}

template <typename T, typename Slot, int kPer>
void launch_as(const StoreFp8Params& p, cudaStream_t stream) {
  const int64_t threads = p.num_tokens * (p.row_elems / kPer);
  const int64_t blocks = (threads + 255) / 256;
  KVATTN_CHECK(blocks <= 0x7fffffff, "store_kv: ", p.num_tokens, " tokens exceed one launch");
  store_kv_fp8_kernel<T, Slot, kPer><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_typed(const StoreFp8Params& p, bool slot64, bool vec, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    if (vec) {
      slot64 ? launch_as<T, int64_t, 8>(p, stream) : launch_as<T, int32_t, 8>(p, stream);
      return;
    }
  }
  slot64 ? launch_as<T, int64_t, 1>(p, stream) : launch_as<T, int32_t, 1>(p, stream);
}

bool aligned_to(const void* ptr, uintptr_t n) { return (reinterpret_cast<uintptr_t>(ptr) % n) == 0; }

}  // namespace

void store_kv_fp8(const TensorView& key, const TensorView& value, const TensorView& k_cache,
                  const TensorView& v_cache, const TensorView& slot_mapping,
                  const TensorView& k_scale, const TensorView& v_scale, Stream stream) {
  const int64_t n = slot_mapping.size(0);
  StoreFp8Params p{};
  p.key = key.data;
  p.value = value.data;
  p.k_cache = static_cast<uint8_t*>(k_cache.data);
  p.v_cache = static_cast<uint8_t*>(v_cache.data);
  p.k_scale = k_scale.defined() ? k_scale.ptr<const float>() : nullptr;
  p.v_scale = v_scale.defined() ? v_scale.ptr<const float>() : nullptr;
  p.slot_mapping = slot_mapping.data;
  p.slot_stride = slot_mapping.stride(0);
  p.num_tokens = n;
  p.key_stride = key.stride(0);
  p.value_stride = value.stride(0);
  p.k_block_stride = k_cache.stride(0);
  p.v_block_stride = v_cache.stride(0);
  p.block_size = k_cache.size(1);
  p.num_slots = k_cache.size(0) * k_cache.size(1);
  p.head_dim = static_cast<int>(key.size(2));
  const int64_t row = key.size(1) * key.size(2);
  if (n == 0 || row == 0) return;
  KVATTN_CHECK(row < (int64_t{1} << 31), "store_kv: rows of ", row,
               " elements exceed the kernel's 32-bit row indexing");
  p.row_elems = static_cast<int>(row);

  const int device = key.device.index;
  DeviceGuard guard(device);
  p.fault_word = fault_word_ptr(device);
  const int64_t es = dtype_size(key.dtype);
  const bool vec = es == 2 && p.head_dim % 8 == 0 && aligned_to(key.data, 16) &&
                   aligned_to(value.data, 16) && (p.key_stride * es) % 16 == 0 &&
                   (p.value_stride * es) % 16 == 0 && aligned_to(k_cache.data, 8) &&
                   aligned_to(v_cache.data, 8) && p.k_block_stride % 8 == 0 &&
                   p.v_block_stride % 8 == 0;
  const bool slot64 = slot_mapping.dtype == DType::kI64;
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (key.dtype) {
    case DType::kBF16: launch_typed<__nv_bfloat16>(p, slot64, vec, s); break;
    case DType::kF16: launch_typed<__half>(p, slot64, vec, s); break;
    case DType::kF32: launch_typed<float>(p, slot64, false, s); break;
    default: KVATTN_FAIL("store_kv: unsupported key dtype on CUDA: ", key.dtype);
  }
}

}  // namespace kvattn::cuda
