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

// How the warp kernel's 16-byte accesses address the L2 (store_kv_variant; other widths
// always use plain accesses).
enum class MemHint {
  kPlain,
  kLoad256,          // loads ask the L2 for 256-byte fetches (.L2::256B)
  kLoadFirstStoreLast,  // loads evict-first, stores evict-last (L2 cache policies)
};

template <int kBytes, MemHint kHint, typename Vec>
__device__ __forceinline__ Vec load_vec(const Vec* src, uint64_t policy) {
  if constexpr (kBytes == 16 && kHint == MemHint::kLoad256) {
    Vec r;
    asm volatile("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(src));
    return r;
  } else if constexpr (kBytes == 16 && kHint == MemHint::kLoadFirstStoreLast) {
    Vec r;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(src), "l"(policy));
    return r;
  } else {
    return *src;
  }
}

template <int kBytes, MemHint kHint, typename Vec>
__device__ __forceinline__ void store_vec(Vec* dst, const Vec& v, uint64_t policy) {
  if constexpr (kBytes == 16 && kHint == MemHint::kLoadFirstStoreLast) {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(dst),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
  } else {
    *dst = v;
  }
}

// One warp per (token, part); parts of more than 32 * kUnroll vectors loop.
template <int kBytes, typename Slot, int kCtaThreads, MemHint kHint>
__global__ void __launch_bounds__(kCtaThreads, 2048 / kCtaThreads / 2)
    store_kv_kernel(const __grid_constant__ StoreKvParams p) {
  using Vec = typename VecOf<kBytes>::type;
  uint64_t load_policy = 0, store_policy = 0;
  if constexpr (kHint == MemHint::kLoadFirstStoreLast) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(load_policy));
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(store_policy));
  }
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
        kx[u] = load_vec<kBytes, kHint>(ksrc + v, load_policy);
        vx[u] = load_vec<kBytes, kHint>(vsrc + v, load_policy);
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
        store_vec<kBytes, kHint>(kdst + v, kx[u], store_policy);
        store_vec<kBytes, kHint>(vdst + v, vx[u], store_policy);
      }
    }
  }
}

// Experiment (16-byte vectors, rows of at most 128 of them): a warp moves two rows A and B.
// kMode 0: A = token t's K row, B = token (t + ceil(T/2)) % T's V row (a K row and a V row of
// unrelated slots in flight together); kMode 1: warps [0, ceil(T/2)) move the K rows of tokens
// 2w and 2w + 1, the warps after them the V rows (each cache written in its own half of the
// grid). Bad slots are recorded by the warp that moves the token's K row.
template <typename Slot, int kMode>
__global__ void __launch_bounds__(128, 8) store_kv_pair_kernel(const __grid_constant__ StoreKvParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x) >> 5;
  const int64_t n = p.num_tokens, half = (n + 1) / 2;
  int64_t ta, tb;
  bool a_v, b_v;
  if constexpr (kMode == 0) {
    if (w >= n) return;
    ta = w;
    tb = w + half >= n ? w + half - n : w + half;
    a_v = false;
    b_v = true;
  } else {
    const bool v = w >= half;
    const int64_t i = v ? w - half : w;
    if (i >= half) return;
    ta = 2 * i;
    tb = 2 * i + 1;
    a_v = b_v = v;
  }
  const bool b_ok = tb < n;
  const uint4* asrc = reinterpret_cast<const uint4*>(a_v ? p.value + ta * p.value_stride
                                                         : p.key + ta * p.key_stride);
  const uint4* bsrc = reinterpret_cast<const uint4*>(b_v ? p.value + tb * p.value_stride
                                                         : p.key + tb * p.key_stride);
  const int row_vecs = static_cast<int>(p.row_bytes / 16);
  uint4 ax[kUnroll], bx[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int v = lane + 32 * u;
    if (v < row_vecs) {
      ax[u] = asrc[v];
      if (b_ok) bx[u] = bsrc[v];
    }
  }
  const Slot* slots = static_cast<const Slot*>(p.slot_mapping);
  const int64_t sa = static_cast<int64_t>(slots[ta * p.slot_stride]);
  const int64_t sb = b_ok ? static_cast<int64_t>(slots[tb * p.slot_stride]) : -1;
  int64_t va = 0, vb = 0;
  const int64_t ka = dest_offset(p, sa, lane == 0 && !a_v, va);
  const int64_t kb = dest_offset(p, sb, lane == 0 && !b_v, vb);
  uint4* adst = ka < 0 ? nullptr : reinterpret_cast<uint4*>(a_v ? p.v_cache + va : p.k_cache + ka);
  uint4* bdst = kb < 0 ? nullptr : reinterpret_cast<uint4*>(b_v ? p.v_cache + vb : p.k_cache + kb);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int v = lane + 32 * u;
    if (v < row_vecs) {
      if (adst != nullptr) adst[v] = ax[u];
      if (bdst != nullptr) bdst[v] = bx[u];
    }
  }
}

// Bulk-copy form (sm_90, 16-byte aligned rows): one warp per CTA stages `tile` tokens' K and
// V rows in shared memory with cp.async.bulk (the TMA unit; completion on an mbarrier), then
// each lane sends its token's two rows to their slots with bulk stores. The SM issues 4 copy
// instructions per token instead of a vector access per 16 bytes. Shared memory holds
// [K rows of the tile][V rows of the tile], row_bytes each.
template <typename Slot>
__global__ void __launch_bounds__(32) store_kv_bulk_kernel(const __grid_constant__ StoreKvParams p,
                                                           int tile) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) char stage[];
  __shared__ __align__(8) uint64_t full;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * tile;
  const int n = static_cast<int>(min(static_cast<int64_t>(tile), p.num_tokens - first));
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full));
  const uint32_t rows = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
  const uint32_t rb = static_cast<uint32_t>(p.row_bytes);
  if (lane == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  if (lane == 0) {  // the one arrival, with every byte the tile's loads will deliver
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(2 * static_cast<uint32_t>(n) * rb)
                 : "memory");
  }
  for (int i = lane; i < n; i += 32) {
    const int64_t t = first + i;
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(rows + i * rb), "l"(p.key + t * p.key_stride), "r"(rb), "r"(bar)
        : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(rows + (tile + i) * rb), "l"(p.value + t * p.value_stride), "r"(rb), "r"(bar)
        : "memory");
  }
  // The slots' loads overlap the rows' (tile <= 32: one token per lane).
  int64_t koff = -1, voff = 0;
  if (lane < n) {
    const int64_t slot = static_cast<int64_t>(
        static_cast<const Slot*>(p.slot_mapping)[(first + lane) * p.slot_stride]);
    koff = dest_offset(p, slot, true, voff);
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred ready;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], 0;\n"
        "selp.u32 %0, 1, 0, ready;\n}\n"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  }
  if (koff >= 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(p.k_cache + koff),
                 "r"(rows + lane * rb), "r"(rb)
                 : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(p.v_cache + voff),
                 "r"(rows + (tile + lane) * rb), "r"(rb)
                 : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  // The stores read shared memory after this CTA could exit: wait until they have.
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

// Pipelined bulk form (sm_90): a few CTAs per SM, each a warp that walks its tiles (tile t,
// t + grid, ...) through a ring of `stages` shared-memory stages: while one tile's rows go out
// to their slots (bulk stores), the next stages - 1 tiles' rows and slots are on their way in.
// A stage is refilled once the bulk stores that read it have (wait_group.read), its rows
// arrive on the stage's mbarrier, its slots (4- or 8-byte cp.async, one per lane) on the
// lane's cp.async groups. Shared memory: rows [stages][K tile | V tile], slots
// [stages][32], mbarriers [stages].
template <typename Slot, int kStages>
__global__ void __launch_bounds__(32) store_kv_ring_kernel(const __grid_constant__ StoreKvParams p,
                                                           int tile) {
  constexpr int stages = kStages;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) char smem[];
  const int lane = static_cast<int>(threadIdx.x);
  const uint32_t rb = static_cast<uint32_t>(p.row_bytes);
  const uint32_t stage_bytes = 2 * static_cast<uint32_t>(tile) * rb;
  const uint32_t rows = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  Slot* slot_ring = reinterpret_cast<Slot*>(smem + stages * stage_bytes);
  const uint32_t slots_at = static_cast<uint32_t>(__cvta_generic_to_shared(slot_ring));
  const uint32_t bars = slots_at + stages * 32 * static_cast<uint32_t>(sizeof(Slot));
  const int64_t ntiles = (p.num_tokens + tile - 1) / tile;
  if (lane < stages) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * lane) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();

  // The CTA's k-th tile: rows onto stage k % stages's mbarrier, slots into its ring entry.
  // Every lane commits one cp.async group per call, tile or not, so groups count tiles.
  auto issue = [&](int64_t k) {
    const int64_t t = blockIdx.x + k * gridDim.x;
    if (t < ntiles) {
      const int s = static_cast<int>(k % stages);
      const int64_t first = t * tile;
      const int n = static_cast<int>(min(static_cast<int64_t>(tile), p.num_tokens - first));
      const uint32_t bar = bars + 8 * s;
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                     "r"(2 * static_cast<uint32_t>(n) * rb)
                     : "memory");
      }
      if (lane < n) {
        const int64_t tok = first + lane;
        const uint32_t at = rows + s * stage_bytes + lane * rb;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
            ::"r"(at), "l"(p.key + tok * p.key_stride), "r"(rb), "r"(bar)
            : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
            ::"r"(at + tile * rb), "l"(p.value + tok * p.value_stride), "r"(rb), "r"(bar)
            : "memory");
        const Slot* src = static_cast<const Slot*>(p.slot_mapping) + tok * p.slot_stride;
        const uint32_t dst = slots_at + (s * 32 + lane) * static_cast<uint32_t>(sizeof(Slot));
        if constexpr (sizeof(Slot) == 8) {
          asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
        } else {
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
        }
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };

  for (int k = 0; k < stages - 1; ++k) issue(k);
  for (int64_t k = 0;; ++k) {
    const int64_t t = blockIdx.x + k * gridDim.x;
    if (t >= ntiles) break;
    const int s = static_cast<int>(k % stages);
    const uint32_t parity = static_cast<uint32_t>((k / stages) & 1);
    // Tiles k .. k + stages - 2 have groups in flight: all but the oldest may stay so.
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n.reg .pred ready;\n"
          "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
          "selp.u32 %0, 1, 0, ready;\n}\n"
          : "=r"(done)
          : "r"(bars + 8 * s), "r"(parity)
          : "memory");
    }
    const int64_t first = t * tile;
    const int n = static_cast<int>(min(static_cast<int64_t>(tile), p.num_tokens - first));
    if (lane < n) {
      int64_t voff = 0;
      const int64_t koff = dest_offset(p, static_cast<int64_t>(slot_ring[s * 32 + lane]), true, voff);
      if (koff >= 0) {
        const uint32_t at = rows + s * stage_bytes + lane * rb;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         p.k_cache + koff),
                     "r"(at), "r"(rb)
                     : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         p.v_cache + voff),
                     "r"(at + tile * rb), "r"(rb)
                     : "memory");
      }
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Tile k - 1's stores have read its stage (only tile k's may still be reading): refill it.
    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    __syncwarp();
    issue(k + stages - 1);
  }
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
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

template <int kBytes, typename Slot, MemHint kHint>
void launch_warps(const StoreKvParams& p, int cta_threads, cudaStream_t stream) {
  const int64_t warps = p.num_tokens * p.parts;
  const int64_t blocks = (warps * 32 + cta_threads - 1) / cta_threads;
  KVATTN_CHECK(blocks <= 0x7fffffff, "store_kv: ", p.num_tokens, " tokens exceed one launch");
  if (cta_threads == 128) {
    store_kv_kernel<kBytes, Slot, 128, kHint><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  } else if (cta_threads == 64) {
    store_kv_kernel<kBytes, Slot, 64, kHint><<<static_cast<unsigned>(blocks), 64, 0, stream>>>(p);
  } else if (cta_threads == 32) {
    store_kv_kernel<kBytes, Slot, 32, kHint><<<static_cast<unsigned>(blocks), 32, 0, stream>>>(p);
  } else {
    store_kv_kernel<kBytes, Slot, 256, kHint><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  }
}

template <int kBytes, typename Slot>
void launch_as(const StoreKvParams& p, int variant, cudaStream_t stream) {
  switch (variant) {
    case 1: launch_warps<kBytes, Slot, MemHint::kPlain>(p, 256, stream); break;
    case 2: launch_warps<kBytes, Slot, MemHint::kLoad256>(p, 128, stream); break;
    case 5: launch_warps<kBytes, Slot, MemHint::kLoadFirstStoreLast>(p, 128, stream); break;
    case 6: launch_warps<kBytes, Slot, MemHint::kPlain>(p, 64, stream); break;
    case 7: launch_warps<kBytes, Slot, MemHint::kPlain>(p, 32, stream); break;
    default: launch_warps<kBytes, Slot, MemHint::kPlain>(p, 128, stream); break;
  }
}

template <int kBytes>
void launch(const StoreKvParams& p, bool slot64, int variant, cudaStream_t stream) {
  if (slot64) {
    launch_as<kBytes, int64_t>(p, variant, stream);
  } else {
    launch_as<kBytes, int32_t>(p, variant, stream);
  }
  CUDA_CHECK_LAUNCH();
}

// The bulk form's tile (tokens per CTA) for `variant` 3 (about 32 KB of rows) or 4 (16 KB),
// or 0 when it cannot run: it needs sm_90, 16-byte aligned rows and strides, and rows small
// enough for a tile in 48 KB of shared memory.
int bulk_tile(const StoreKvParams& p, int vec, int variant, int device) {
  if ((variant != 3 && variant != 4 && variant != 8) || vec != 16 || compute_major(device) < 9) {
    return 0;
  }
  const int64_t budget = variant == 3 ? (32 << 10) : (variant == 4 ? (16 << 10) : (8 << 10));
  int64_t tile = budget / (2 * p.row_bytes);
  tile = tile < 1 ? 1 : (tile > 32 ? 32 : tile);
  if (2 * tile * p.row_bytes > (48 << 10)) return 0;
  // Small batches: at least two CTAs per SM before tiles grow.
  const int64_t spread = p.num_tokens / (2 * static_cast<int64_t>(sm_count(device)));
  if (spread < tile) tile = spread < 1 ? 1 : spread;
  return static_cast<int>(tile);
}

constexpr int kRingStages = 6;

// The ring form's tile (16 KB of rows per stage), or 0 when it cannot run (as bulk_tile).
int ring_tile(const StoreKvParams& p, int vec, int variant, int device) {
  if (variant != 9 || vec != 16 || compute_major(device) < 9) return 0;
  int64_t tile = (16 << 10) / (2 * p.row_bytes);
  tile = tile < 1 ? 1 : (tile > 32 ? 32 : tile);
  if (kRingStages * 2 * tile * p.row_bytes > (200 << 10)) return 0;
  return static_cast<int>(tile);
}

template <typename Slot>
void launch_ring_as(const StoreKvParams& p, int tile, cudaStream_t stream, int device) {
  auto kernel = store_kv_ring_kernel<Slot, kRingStages>;
  const size_t smem = static_cast<size_t>(kRingStages * (2 * tile * p.row_bytes + 32 * sizeof(Slot) + 8));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32, smem));
  const int64_t ntiles = (p.num_tokens + tile - 1) / tile;
  int64_t grid = static_cast<int64_t>(sm_count(device)) * (per_sm < 1 ? 1 : per_sm);
  if (grid > ntiles) grid = ntiles;
  kernel<<<static_cast<unsigned>(grid), 32, smem, stream>>>(p, tile);
  CUDA_CHECK_LAUNCH();
}

void launch_bulk(const StoreKvParams& p, bool slot64, int tile, cudaStream_t stream) {
  const int64_t blocks = (p.num_tokens + tile - 1) / tile;
  KVATTN_CHECK(blocks <= 0x7fffffff, "store_kv: ", p.num_tokens, " tokens exceed one launch");
  const size_t smem = static_cast<size_t>(2 * tile * p.row_bytes);
  if (slot64) {
    store_kv_bulk_kernel<int64_t><<<static_cast<unsigned>(blocks), 32, smem, stream>>>(p, tile);
  } else {
    store_kv_bulk_kernel<int32_t><<<static_cast<unsigned>(blocks), 32, smem, stream>>>(p, tile);
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
  // Variants (cuda_tuning().store_kv_variant): 0 = warps in CTAs of 128 threads, plain
  // accesses (on the H200 0.2-1% faster than 256 at 4096 and 65536 tokens and equal at 256,
  // docs/perf/NOTES.md, round 4); 1 = CTAs of 256; 2 = .L2::256B loads; 3, 4 = bulk copies;
  // 5 = evict-first loads and evict-last stores; 6, 7 = CTAs of 64, 32 threads; 8 = bulk
  // copies, 8 KB per CTA; 9 = pipelined bulk copies (ring).
  const int variant = cuda_tuning().store_kv_variant;
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (const int tile = bulk_tile(p, vec, variant, device); tile > 0) {
    launch_bulk(p, slot64, tile, s);
    return;
  }
  if ((variant == 10 || variant == 11) && vec == 16 && p.row_bytes <= 16 * 32 * kUnroll) {
    const int64_t warps = variant == 10 ? n : 2 * ((n + 1) / 2);
    const unsigned blocks = static_cast<unsigned>((warps * 32 + 127) / 128);
    if (variant == 10) {
      if (slot64) store_kv_pair_kernel<int64_t, 0><<<blocks, 128, 0, s>>>(p);
      else store_kv_pair_kernel<int32_t, 0><<<blocks, 128, 0, s>>>(p);
    } else {
      if (slot64) store_kv_pair_kernel<int64_t, 1><<<blocks, 128, 0, s>>>(p);
      else store_kv_pair_kernel<int32_t, 1><<<blocks, 128, 0, s>>>(p);
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (const int tile = ring_tile(p, vec, variant, device); tile > 0) {
    if (slot64) {
      launch_ring_as<int64_t>(p, tile, s, device);
    } else {
      launch_ring_as<int32_t>(p, tile, s, device);
    }
    return;
  }
  switch (vec) {
    case 16: launch<16>(p, slot64, variant, s); break;
    case 8: launch<8>(p, slot64, variant, s); break;
    case 4: launch<4>(p, slot64, variant, s); break;
    default: launch<2>(p, slot64, variant, s); break;
  }
}

}  // namespace kvattn::cuda
