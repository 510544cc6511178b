// store_kv on the GPU: copies each new token's K and V rows into its slot of the paged cache.
//
// The copy is dtype-blind (bit-exact): a token's row is num_kv_heads * head_dim contiguous
// elements on both sides, so the kernel moves row_bytes bytes per token in the widest vector
// (16, 8, 4 or 2 bytes) that every pointer and stride allows; 16 for the usual layouts.
//
// One warp moves one part of one token (K and V): it loads up to 4 K and 4 V vectors per lane
// before storing any, so 8 independent loads are in flight per thread. Small batches cut each
// row into several parts so that enough warps exist to cover the latency of the GPU.
// Variant (cuda_tuning().store_kv_early_loads, off by default until measured): the first
// loads are issued before the slot is read, so the two memory latencies overlap.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

// Layout (byte strides; one params block per launch, passed by value):
//   key/value   token t's row at  key + t * key_stride         (row_bytes contiguous bytes)
//   caches      slot s = slot_mapping[t * slot_stride]: block b = s / block_size,
//               offset o = s % block_size, row at  k_cache + b * k_block_stride + o * row_bytes
//   num_slots   num_blocks * block_size; slots in [num_slots, inf) are faults, < 0 are skipped
struct StoreKvParams {
  const char* key;
  const char* value;
  char* k_cache;
  char* v_cache;
  const void* slot_mapping;
  int64_t slot_stride;  // elements
  int64_t num_tokens;   // slot_mapping length
  int64_t key_stride;
  int64_t value_stride;
  int64_t k_block_stride;
  int64_t v_block_stride;
  int64_t row_bytes;
  int64_t block_size;
  int64_t num_slots;
  int parts;            // warps per token
  int part_vecs;        // vectors per part (a multiple of 32)
  int tokens_per_warp;  // units (token, part) per warp: 1, or 2 (16-byte vectors only)
  int early_loads;      // 1: the first K/V loads are issued before the slots are known
  int stream_stores;    // 1: evict-first stores
  uint32_t* fault_word;
};

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <int kBytes>
struct VecOf;
template <>
struct VecOf<16> { using type = uint4; };
template <>
struct VecOf<8> { using type = uint2; };
template <>
struct VecOf<4> { using type = uint32_t; };
template <>
struct VecOf<2> { using type = uint16_t; };

template <typename Vec>
__device__ __forceinline__ Vec load_stream(const Vec* p) {
  return __ldcs(p);  // read once: evict-first, keeps L2 for the cache lines being written
}
template <>
__device__ __forceinline__ uint16_t load_stream<uint16_t>(const uint16_t* p) {
  return *p;
}

template <typename Vec>
__device__ __forceinline__ void store_stream(Vec* p, Vec v) {
  __stcs(p, v);  // written once here, read by a later decode: evict-first
}
template <>
__device__ __forceinline__ void store_stream<uint16_t>(uint16_t* p, uint16_t v) {
  *p = v;
}

// One warp moves kTpw units (token, row part): every load of all its units is issued before
// the first store.
template <int kBytes, typename Slot, int kTpw>
__global__ void __launch_bounds__(kThreads, kTpw == 1 ? 4 : 2)
    store_kv_kernel(const __grid_constant__ StoreKvParams p) {
  using Vec = typename VecOf<kBytes>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  const int64_t units = p.num_tokens * p.parts;
  const int64_t unit0 = warp * kTpw;
  if (unit0 >= units) return;
  const int row_vecs = static_cast<int>(p.row_bytes / kBytes);  // < 2^31 (checked on the host)

  bool live[kTpw];
  int64_t token[kTpw];
  int begin[kTpw], end[kTpw];
  const Vec* ksrc[kTpw];
  const Vec* vsrc[kTpw];
  Vec* kdst[kTpw];
  Vec* vdst[kTpw];
#pragma unroll
  for (int j = 0; j < kTpw; ++j) {
    const int64_t unit = unit0 + j;
    live[j] = unit < units;
    token[j] = live[j] ? unit / p.parts : 0;
    const int part = static_cast<int>(unit - token[j] * p.parts);
    begin[j] = part * p.part_vecs;
    end[j] = live[j] ? min(row_vecs, begin[j] + p.part_vecs) : 0;
    ksrc[j] = reinterpret_cast<const Vec*>(p.key + token[j] * p.key_stride);
    vsrc[j] = reinterpret_cast<const Vec*>(p.value + token[j] * p.value_stride);
    kdst[j] = nullptr;
    vdst[j] = nullptr;
  }
  Vec kx[kTpw][kUnroll], vx[kTpw][kUnroll];
  auto load = [&](int off) {
#pragma unroll
    for (int j = 0; j < kTpw; ++j) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = begin[j] + off + lane + 32 * u;
        if (v < end[j]) {
          kx[j][u] = load_stream(ksrc[j] + v);
          vx[j][u] = load_stream(vsrc[j] + v);
        }
      }
    }
  };
  if (p.early_loads) load(0);  // in flight together with the slots' loads

#pragma unroll
  for (int j = 0; j < kTpw; ++j) {
    if (!live[j]) continue;
    const int64_t slot =
        static_cast<int64_t>(static_cast<const Slot*>(p.slot_mapping)[token[j] * p.slot_stride]);
    if (slot < 0 || slot >= p.num_slots) {  // padding, or out of range: skipped
      if (slot >= p.num_slots && lane == 0 && begin[j] == 0) {
        record_fault(p.fault_word, kFaultSlotOutOfRange);
      }
      end[j] = 0;
      continue;
    }
    const int64_t block = slot / p.block_size;
    const int64_t row_in_block = (slot - block * p.block_size) * p.row_bytes;
    kdst[j] = reinterpret_cast<Vec*>(p.k_cache + block * p.k_block_stride + row_in_block);
    vdst[j] = reinterpret_cast<Vec*>(p.v_cache + block * p.v_block_stride + row_in_block);
  }

  for (int off = 0; off < p.part_vecs; off += 32 * kUnroll) {
    if (!p.early_loads || off != 0) load(off);
#pragma unroll
    for (int j = 0; j < kTpw; ++j) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = begin[j] + off + lane + 32 * u;
        if (v < end[j]) {
          if (p.stream_stores) {
            store_stream(kdst[j] + v, kx[j][u]);
            store_stream(vdst[j] + v, vx[j][u]);
          } else {
            kdst[j][v] = kx[j][u];
            vdst[j][v] = vx[j][u];
          }
        }
      }
    }
  }
}

// The widest vector (bytes) that divides every address and stride the kernel touches.
int vector_bytes(const StoreKvParams& p) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(p.key) | reinterpret_cast<uintptr_t>(p.value) |
                        reinterpret_cast<uintptr_t>(p.k_cache) |
                        reinterpret_cast<uintptr_t>(p.v_cache) |
                        static_cast<uint64_t>(p.key_stride) | static_cast<uint64_t>(p.value_stride) |
                        static_cast<uint64_t>(p.k_block_stride) |
                        static_cast<uint64_t>(p.v_block_stride) | static_cast<uint64_t>(p.row_bytes);
  for (int w : {16, 8, 4}) {
    if ((bits & static_cast<uint64_t>(w - 1)) == 0) return w;
  }
  return 2;
}

template <int kBytes, int kTpw = 1>
void launch(const StoreKvParams& p, bool slot64, cudaStream_t stream) {
  const int64_t warps = (p.num_tokens * p.parts + kTpw - 1) / kTpw;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  KVATTN_CHECK(blocks <= 0x7fffffff, "store_kv: ", p.num_tokens, " tokens exceed one launch");
  const dim3 grid(static_cast<unsigned>(blocks));
  if (slot64) {
    store_kv_kernel<kBytes, int64_t, kTpw><<<grid, kThreads, 0, stream>>>(p);
  } else {
    store_kv_kernel<kBytes, int32_t, kTpw><<<grid, kThreads, 0, stream>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void store_kv(const TensorView& key, const TensorView& value, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& slot_mapping, Stream stream) {
  const int64_t n = slot_mapping.size(0);
  if (n == 0) return;
  const int64_t es = dtype_size(key.dtype);
  StoreKvParams p{};
  p.key = static_cast<const char*>(key.data);
  p.value = static_cast<const char*>(value.data);
  p.k_cache = static_cast<char*>(k_cache.data);
  p.v_cache = static_cast<char*>(v_cache.data);
  p.slot_mapping = slot_mapping.data;
  p.slot_stride = slot_mapping.stride(0);
  p.num_tokens = n;
  p.key_stride = key.stride(0) * es;
  p.value_stride = value.stride(0) * es;
  p.k_block_stride = k_cache.stride(0) * es;
  p.v_block_stride = v_cache.stride(0) * es;
  p.row_bytes = key.size(1) * key.size(2) * es;
  p.block_size = k_cache.size(1);
  p.num_slots = k_cache.size(0) * k_cache.size(1);
  if (p.row_bytes == 0) return;
  KVATTN_CHECK(p.row_bytes < (int64_t{1} << 31), "store_kv: rows of ", p.row_bytes,
               " bytes exceed the kernel's 32-bit row indexing");

  const int device = key.device.index;
  DeviceGuard guard(device);
  p.fault_word = fault_word_ptr(device);

  const int vec = vector_bytes(p);
  const int64_t row_vecs = p.row_bytes / vec;
  // Enough warps to cover memory latency (about 16 per SM); small batches split each row
  // into parts of whole warps (32 vectors).
  const int64_t want_warps = static_cast<int64_t>(sm_count(device)) * 16;
  const int64_t max_parts = (row_vecs + 31) / 32;
  int64_t parts = (want_warps + n - 1) / n;
  parts = parts < 1 ? 1 : (parts > max_parts ? max_parts : parts);
  const int64_t per_part = (row_vecs + parts - 1) / parts;
  p.part_vecs = static_cast<int>((per_part + 31) / 32 * 32);
  p.parts = static_cast<int>((row_vecs + p.part_vecs - 1) / p.part_vecs);

  const CudaTuning& tuning = cuda_tuning();
  p.tokens_per_warp = vec == 16 ? std::clamp(tuning.store_kv_tokens_per_warp, 1, 2) : 1;
  p.early_loads = tuning.store_kv_early_loads ? 1 : 0;
  p.stream_stores = tuning.store_kv_stream_stores ? 1 : 0;
  const bool slot64 = slot_mapping.dtype == DType::kI64;
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (vec) {
    case 16:
      p.tokens_per_warp == 2 ? launch<16, 2>(p, slot64, s) : launch<16>(p, slot64, s);
      break;
    case 8: launch<8>(p, slot64, s); break;
    case 4: launch<4>(p, slot64, s); break;
    default: launch<2>(p, slot64, s); break;
  }
}

}  // namespace kvattn::cuda
