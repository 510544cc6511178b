// dequant_fp8_pages (fp8_dequant_pages.h): one thread per 8 elements (8 code bytes in, 16
// bytes out), converted exactly with fp8_convert.cuh and scaled in float. Memory-bound and
// small (a shared prefix: megabytes), so one plain pass.
#include "kernels/cuda/fp8_dequant_pages.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_convert.cuh"
#include "kvattn/core/error.h"

namespace kvattn::cuda {
namespace {

struct DequantParams {
  const uint8_t* cache;
  const int32_t* table;
  const float* scale;  // null: 1
  void* out;
  int64_t block_stride;  // bytes between blocks
  int64_t num_keys;
  int num_blocks, block_size, heads, head_dim;
};

template <typename T>
__device__ __forceinline__ float to_float(uint32_t bits16) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(bits16 << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  }
}
template <typename T>
__device__ __forceinline__ uint32_t from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

template <typename T>
__global__ void dequant_pages_kernel(const __grid_constant__ DequantParams p) {
  const int vecs = p.head_dim / 8;
  const int64_t n = p.num_keys * p.heads * vecs;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int v = static_cast<int>(i % vecs);
  const int64_t kh = i / vecs;  // key * heads + head
  const int h = static_cast<int>(kh % p.heads);
  const int64_t j = kh / p.heads;
  const int64_t page = j / p.block_size;
  const int off = static_cast<int>(j - page * p.block_size);
  const int blk = p.table[page];
  uint4 w = make_uint4(0, 0, 0, 0);
  if (blk >= 0 && blk < p.num_blocks) {
    const uint8_t* src = p.cache + blk * p.block_stride +
                         (static_cast<int64_t>(off) * p.heads + h) * p.head_dim + v * 8;
    const uint2 q = *reinterpret_cast<const uint2*>(src);
    // e4m3x4_to packs bytes (0, 2) and (1, 3); prmt puts them back in order.
    uint32_t lo0, hi0, lo1, hi1;
    e4m3x4_to<T>(q.x, lo0, hi0);
    e4m3x4_to<T>(q.y, lo1, hi1);
    uint32_t e[4] = {byte_perm(lo0, hi0, 0x5410u), byte_perm(lo0, hi0, 0x7632u),
                     byte_perm(lo1, hi1, 0x5410u), byte_perm(lo1, hi1, 0x7632u)};
    if (p.scale != nullptr) {
      const float s = p.scale[h];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t a = from_float<T>(to_float<T>(e[k] & 0xffffu) * s);
        const uint32_t b = from_float<T>(to_float<T>(e[k] >> 16) * s);
        e[k] = a | (b << 16);
      }
    }
    w = make_uint4(e[0], e[1], e[2], e[3]);
  }
  reinterpret_cast<uint4*>(p.out)[i] = w;
}

}  // namespace

void dequant_fp8_pages(const TensorView& cache, const TensorView& block_table, int64_t num_keys,
                       const TensorView& scale, const TensorView& out, Stream stream) {
  constexpr const char* kFn = "dequant_fp8_pages";
  KVATTN_CHECK(cache.dtype == DType::kF8E4M3 && cache.ndim == 4 && cache.device.is_cuda(), kFn,
               ": cache must be a CUDA float8_e4m3 [blocks, block_size, heads, head_dim] tensor");
  const int64_t bs = cache.size(1), heads = cache.size(2), d = cache.size(3);
  KVATTN_CHECK(cache.stride(3) == 1 && cache.stride(2) == d && cache.stride(1) == heads * d, kFn,
               ": cache blocks must be contiguous");
  KVATTN_CHECK(d % 8 == 0 && (cache.stride(0) % 8) == 0 &&
                   reinterpret_cast<uintptr_t>(cache.data) % 8 == 0,
               kFn, ": head_dim (", d, ") and the block stride must be multiples of 8");
  KVATTN_CHECK(num_keys >= 0 && block_table.dtype == DType::kI32 &&
                   block_table.numel() * bs >= num_keys,
               kFn, ": block_table must hold int32 ids for ", num_keys, " keys");
  KVATTN_CHECK(out.ndim == 3 && out.size(0) == num_keys && out.size(1) == heads &&
                   out.size(2) == d && out.is_contiguous() &&
                   (out.dtype == DType::kBF16 || out.dtype == DType::kF16) &&
                   reinterpret_cast<uintptr_t>(out.data) % 16 == 0,
               kFn, ": out must be a 16-byte aligned contiguous bf16/fp16 [", num_keys, ", ",
               heads, ", ", d, "] but is ", out.shape_str());
  KVATTN_CHECK(!scale.defined() || (scale.dtype == DType::kF32 && scale.numel() == heads), kFn,
               ": scale must be float32 [", heads, "]");
  if (num_keys == 0) return;
  DequantParams p;
  p.cache = static_cast<const uint8_t*>(cache.data);
  p.table = block_table.ptr<const int32_t>();
  p.scale = scale.defined() ? scale.ptr<const float>() : nullptr;
  p.out = out.data;
  p.block_stride = cache.stride(0);
  p.num_keys = num_keys;
  p.num_blocks = static_cast<int>(cache.size(0));
  p.block_size = static_cast<int>(bs);
  p.heads = static_cast<int>(heads);
  p.head_dim = static_cast<int>(d);
  const int64_t n = num_keys * heads * (d / 8);
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  auto* s = static_cast<cudaStream_t>(stream.handle);
  if (out.dtype == DType::kBF16) {
    dequant_pages_kernel<__nv_bfloat16><<<blocks, threads, 0, s>>>(p);
  } else {
    dequant_pages_kernel<__half><<<blocks, threads, 0, s>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvattn::cuda
