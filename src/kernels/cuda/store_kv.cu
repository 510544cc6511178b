// store_kv on the GPU: copies each new token's K and V rows into its slot of the paged cache.
//
// The copy is dtype-blind (bit-exact): a token's row is num_kv_heads * head_dim contiguous
// elements on both sides, so the kernel moves row_bytes bytes per token in the widest vector
// (16, 8, 4 or 2 bytes) that every pointer and stride allows; 16 for the usual layouts.
//
// One warp moves one part of one token (K and V): it loads up to 4 K and 4 V vectors per lane
// before storing any, so 8 independent loads are in flight per thread, and issues them before
// the slot is read, so the two memory latencies overlap (a padding token's row is read for
// nothing). Small batches cut each row into several parts so that enough warps exist to cover
// the latency of the GPU. Plain loads and stores, CTAs of 128 threads: on the H200 evict-first
// (.cs) hints were 5% slower at 65536 tokens after an L2 flush (do_bench's way: the flush's
// dirty lines outlive the evict-first ones) and equal otherwise; a persistent grid was 40%
// slower (docs/perf/NOTES.md, store_kv round 4).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_faults.cuh"
#include "kernels/cuda/device_props.h"
#include "kernels/cuda/tuning.h"

namespace kvattn::cuda {
namespace {

// Division by a run-time divisor d in [1, 2^31) for numerators below 2^31 in three
// instructions (Granlund-Montgomery: q = (umulhi(n, m) + n) >> l, l = ceil(log2 d)); the
// division subroutine otherwise sits between the slot's arrival and the first store.
struct FastDiv {
  uint32_t m = 1, l = 0;  // d = 1 by default
};
FastDiv make_fast_div(int64_t d) {
  const auto ud = static_cast<uint64_t>(d);
  FastDiv f;
  while ((uint64_t{1} << f.l) < ud) ++f.l;
  f.m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.l) - ud)) / ud + 1);
  return f;
}
__device__ __forceinline__ uint32_t fast_div(uint32_t n, const FastDiv& f) {
  return (__umulhi(n, f.m) + n) >> f.l;
}

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
  int parts;        // warps per token
  int part_vecs;    // vectors per part (a multiple of 32)
  int idx32;        // warps and slots fit in 31 bits: FastDiv divisions (fewer instructions)
  int flat;         // each cache's blocks are back to back: a slot's row at slot * row_bytes
  FastDiv parts_div, block_div;  // idx32 only
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

// Warp `warp`'s (token, part).
__device__ __forceinline__ void item_of(const StoreKvParams& p, int64_t warp, int64_t& token,
                                        int& part) {
  if (p.idx32) {  // the common case: FastDiv, not the 64-bit division subroutine
    const uint32_t w = static_cast<uint32_t>(warp);
    const uint32_t t = fast_div(w, p.parts_div);
    token = t;
    part = static_cast<int>(w - t * static_cast<uint32_t>(p.parts));
  } else {
    token = warp / p.parts;
    part = static_cast<int>(warp - token * p.parts);
  }
}

// Byte offset of `slot`'s K row in k_cache (its V row's in v_cache goes to v_offset); -1 for a
// skipped (negative) slot or a bad one (recorded in the fault word when `report`).
__device__ __forceinline__ int64_t dest_offset(const StoreKvParams& p, int64_t slot, bool report,
                                               int64_t& v_offset) {
  if (slot < 0) return -1;  // padding
  if (slot >= p.num_slots) {
    if (report) record_fault(p.fault_word, kFaultSlotOutOfRange);
    return -1;
  }
  if (p.flat) {
    v_offset = slot * p.row_bytes;
    return v_offset;
  }
  int64_t block, row_in_block;
  if (p.idx32) {
    const uint32_t s32 = static_cast<uint32_t>(slot);
    const uint32_t blk = fast_div(s32, p.block_div);
    block = blk;
    row_in_block = static_cast<int64_t>(s32 - blk * static_cast<uint32_t>(p.block_size)) * p.row_bytes;
  } else {
    block = slot / p.block_size;
    row_in_block = (slot - block * p.block_size) * p.row_bytes;
  }
  v_offset = block * p.v_block_stride + row_in_block;
  return block * p.k_block_stride + row_in_block;
}

// One warp per (token, part); parts of more than 32 * kUnroll vectors loop.
template <int kBytes, typename Slot, int kCtaThreads>
__global__ void __launch_bounds__(kCtaThreads, 2048 / kCtaThreads / 2)
    store_kv_kernel(const __grid_constant__ StoreKvParams p) {
  using Vec = typename VecOf<kBytes>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kCtaThreads + threadIdx.x) >> 5;
  int64_t token;
  int part;
  item_of(p, warp, token, part);
  if (token >= p.num_tokens) return;

  const Vec* ksrc = reinterpret_cast<const Vec*>(p.key + token * p.key_stride);
  const Vec* vsrc = reinterpret_cast<const Vec*>(p.value + token * p.value_stride);
  const int row_vecs = static_cast<int>(p.row_bytes / kBytes);  // < 2^31 (checked on the host)
  const int begin = part * p.part_vecs;
  const int end = min(row_vecs, begin + p.part_vecs);
  Vec kx[kUnroll], vx[kUnroll];
  auto load = [&](int v0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      if (v < end) {
        kx[u] = ksrc[v];
        vx[u] = vsrc[v];
      }
    }
  };
  load(begin + lane);  // in flight together with the slot's load

  const int64_t slot =
      static_cast<int64_t>(static_cast<const Slot*>(p.slot_mapping)[token * p.slot_stride]);
  int64_t voff = 0;
  const int64_t koff = dest_offset(p, slot, lane == 0 && part == 0, voff);
  if (koff < 0) return;
  Vec* kdst = reinterpret_cast<Vec*>(p.k_cache + koff);
  Vec* vdst = reinterpret_cast<Vec*>(p.v_cache + voff);

  for (int v0 = begin + lane; v0 < end; v0 += 32 * kUnroll) {
    if (v0 != begin + lane) load(v0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      if (v < end) {
        kdst[v] = kx[u];
        vdst[v] = vx[u];
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

template <int kBytes, typename Slot>
void launch_as(const StoreKvParams& p, int cta_threads, cudaStream_t stream) {
  const int64_t warps = p.num_tokens * p.parts;
  const int64_t blocks = (warps * 32 + cta_threads - 1) / cta_threads;
  KVATTN_CHECK(blocks <= 0x7fffffff, "store_kv: ", p.num_tokens, " tokens exceed one launch");
  if (cta_threads == 128) {
    store_kv_kernel<kBytes, Slot, 128><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  } else {
    store_kv_kernel<kBytes, Slot, 256><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  }
}

template <int kBytes>
void launch(const StoreKvParams& p, bool slot64, int cta_threads, cudaStream_t stream) {
  if (slot64) {
    launch_as<kBytes, int64_t>(p, cta_threads, stream);
  } else {
    launch_as<kBytes, int32_t>(p, cta_threads, stream);
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

  const int64_t total_warps = n * p.parts + kThreads / 32;  // the grid's warps, rounded up
  p.idx32 = total_warps < (int64_t{1} << 31) && p.num_slots < (int64_t{1} << 31) &&
            p.block_size < (int64_t{1} << 31);
  if (p.idx32) {
    p.parts_div = make_fast_div(p.parts);
    p.block_div = make_fast_div(p.block_size);
  }
  p.flat = p.k_block_stride == p.block_size * p.row_bytes &&
           p.v_block_stride == p.block_size * p.row_bytes;
  const bool slot64 = slot_mapping.dtype == DType::kI64;
  // CTAs of 128 threads by default: on the H200 0.2-1% faster than 256 at 4096 and 65536
  // tokens and equal at 256 (docs/perf/NOTES.md, round 4).
  const int cta = cuda_tuning().store_kv_variant == 1 ? 256 : 128;
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (vec) {
    case 16: launch<16>(p, slot64, cta, s); break;
    case 8: launch<8>(p, slot64, cta, s); break;
    case 4: launch<4>(p, slot64, cta, s); break;
    default: launch<2>(p, slot64, cta, s); break;
  }
}

}  // namespace kvattn::cuda
