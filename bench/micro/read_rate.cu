// The DRAM read ceiling by three ways of loading (issue 16): does a bulk copy (TMA's
// cp.async.bulk, one instruction a chunk, completion counted on an mbarrier) read faster than
// the 16-byte cp.async per lane that kvattn's decode issues, or than plain vector loads?
// cuDNN's decode reads 4.42-4.52 TB/s where our read ceiling (vector loads) measured 4.34.
// Each kernel streams a 2 GiB buffer once (40x the L2) and folds what it read into one word so
// nothing is dead; median of 15 launches after 3 warm-ups. Last, the paged decode's own
// pattern (read_paged), loads only and with a stand-in for its math, beside the same bytes
// read a page at a time by the whole CTA (read_paged's kPages). `read_rate paged`: that part
// alone.
//   ld      : ld.global.nc.v4 per thread, 8 in flight, grid-stride
//   cpasync : per warp a ring of S stages of 8 KB (16 cp.async of 16 B a lane), as the decode
//   bulk    : per CTA a ring of S stages of C bytes, one cp.async.bulk a stage by one thread
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc bench/micro/read_rate.cu \
//     -o /tmp/read_rate && /tmp/read_rate
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/hopper/sm90_ptx.cuh"  // the mbarrier wrappers

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

constexpr int64_t kBytes = int64_t{2} << 30;

__device__ __forceinline__ uint4 ld_nc(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__global__ void read_ld(const uint4* src, int64_t n16, uint32_t* out) {
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n16; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = ld_nc(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ld_nc(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Per warp: chunks of 8 KB (lane l copies 16 B at l * 16 + k * 512, k < 16), S stages, waiting
// for the oldest stage only (the decode's pipeline).
template <int S>
__global__ void read_cp_async_s(const uint8_t* src, int64_t chunks, uint32_t* out) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  uint8_t* ring = smem + warp * S * 8192;
  const int64_t gw = int64_t{blockIdx.x} * warps + warp, nw = int64_t{gridDim.x} * warps;
  uint32_t acc = 0;
  auto issue = [&](int64_t c, int s) {
    if (c < chunks) {
      const uint8_t* g = src + c * 8192 + lane * 16;
      const uint32_t d = smem_u32(ring + s * 8192 + lane * 16);
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d + k * 512),
                     "l"(g + k * 512));
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  int64_t c = gw;
  for (int s = 0; s < S - 1; ++s) issue(c + s * nw, s);
  for (int64_t j = 0; c < chunks; ++j, c += nw) {
    issue(c + (S - 1) * nw, static_cast<int>((j + S - 1) % S));
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
    __syncwarp();
    acc ^= reinterpret_cast<const uint32_t*>(ring + (j % S) * 8192)[lane];
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

// Per CTA: one thread issues bulk copies of `chunk` bytes into S stages.
__global__ void read_bulk(const uint8_t* src, int64_t chunks, int chunk, int stages,
                          uint32_t* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the wrappers exist for sm_90a device code only
  using namespace kvattn::cuda::sm90;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[16];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) mbar_init(smem_u32(&bars[s]), 1);
  fence_barrier_init();
  uint32_t acc = 0;
  auto issue = [&](int64_t c, int s) {
    const uint32_t bar = smem_u32(&bars[s]);
    mbar_arrive_expect_tx(bar, static_cast<uint32_t>(chunk));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(smem_u32(smem + int64_t{s} * chunk)), "l"(src + c * chunk), "r"(chunk), "r"(bar)
        : "memory");
  };
  int64_t j = 0;
  int64_t c = blockIdx.x;
  for (int s = 0; s < stages && c + int64_t{s} * gridDim.x < chunks; ++s) {
    issue(c + int64_t{s} * gridDim.x, s);
  }
  for (; c < chunks; c += gridDim.x, ++j) {
    const int s = static_cast<int>(j % stages);
    mbar_wait(smem_u32(&bars[s]), static_cast<uint32_t>((j / stages) & 1));
    acc ^= reinterpret_cast<const uint32_t*>(smem + int64_t{s} * chunk)[0];
    const int64_t next = c + int64_t{stages} * gridDim.x;
    if (next < chunks) issue(next, s);
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
#endif
}


// The paged decode's loading organisation without its math (issue 16: the bf16 stream kernel
// reads at ~90% of the read ceiling, cuDNN's contiguous decode at ~97-99%; is the loss in how
// the kernel loads or in what it computes between loads?). As decode_split_kernel.cuh: an NHD
// page-16 cache [pages, 16, heads, row_bytes / 2] per K and V, a CTA of `heads` warps (warp w
// = KV head w, all heads of the cache), each warp a cp.async ring of S stages of one tile (16
// keys of K and of V: 16 B a lane, 8 copies each at 256-byte rows), the CTA's tiles an equal
// range of the concatenated pages, each page's id read one issue ahead from a block table
// (random or identity permutation). `chain`: dependent FFMAs per tile after the stage lands
// (a stand-in for the tile's math: 0 = loads only).
//
// kPages: the same bytes in another order: each page's K (16 keys x all KV heads, contiguous)
// and then its V copied as one sweep by all of the CTA's threads (16 B a lane, consecutive
// lanes on consecutive bytes) into a CTA-wide ring, a stage published by __syncthreads; each
// warp then reads its head's rows. The order a CTA-level page load (one TMA box of all KV
// heads a page) would read in, against the warp's 16 strided 128- or 256-byte rows
// (docs/notes/decode-next.md, session 29).
//
// kHnd (warp order only): the cache as HND pages [pages, heads, 16, row_bytes / 2] (FlashInfer's
// and vLLM's other layout), so a warp's 16 rows of its head are one contiguous 16 x row_bytes
// chunk instead of 16 rows strided by heads x row_bytes (session 30: is the NHD d64 cache's
// 128-byte row the loss at 96x4096 9/3?).
template <int S, bool kPages, bool kHnd = false>
__global__ void read_paged(const uint8_t* kc, const uint8_t* vc, const int* table, int64_t pages,
                           int row_bytes, int chain, uint32_t* out) {
  static_assert(!(kPages && kHnd), "a whole page is contiguous in either layout");
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int heads = blockDim.x >> 5;
  const int page_bytes = 16 * heads * row_bytes;  // one tensor's page
  // A stage: the warp's 16 keys of K, then of V; or (kPages) the CTA's page of K, then of V.
  const int stage_bytes = kPages ? 2 * page_bytes : 32 * row_bytes;
  uint8_t* ring = kPages ? smem : smem + warp * S * stage_bytes;
  const int chunks = row_bytes / 16;           // 16-byte pieces a row
  const int keys_per_copy = 32 / chunks;       // rows one copy instruction covers
  const int64_t p0 = pages * blockIdx.x / gridDim.x, p1 = pages * (blockIdx.x + 1) / gridDim.x;
  const int chunk = lane % chunks, key0 = lane / chunks;
  const int64_t head_off = int64_t{warp} * row_bytes + chunk * 16;
  int next_id = p0 < p1 ? __ldg(table + p0) : 0;
  auto copy16 = [&](uint32_t d, const uint8_t* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
  };
  auto issue = [&](int64_t pg, int s) {
    if (pg < p1) {
      const int id = next_id;
      next_id = pg + 1 < p1 ? __ldg(table + pg + 1) : 0;  // one issue ahead, as the kernel
      const uint32_t d = smem_u32(ring + s * stage_bytes);
      const int64_t base = int64_t{id} * page_bytes;
      if constexpr (kPages) {
        for (int o = static_cast<int>(threadIdx.x) * 16; o < page_bytes; o += blockDim.x * 16) {
          copy16(d + o, kc + base + o);
          copy16(d + page_bytes + o, vc + base + o);
        }
      } else {
        for (int key = key0; key < 16; key += keys_per_copy) {
          const int64_t src = kHnd ? base + (int64_t{warp} * 16 + key) * row_bytes + chunk * 16
                                   : base + int64_t{key} * heads * row_bytes + head_off;
          const uint32_t o = key * row_bytes + chunk * 16;
          copy16(d + o, kc + src);
          copy16(d + 16 * row_bytes + o, vc + src);
        }
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  auto sync = [] {
    if constexpr (kPages) {
      __syncthreads();
    } else {
      __syncwarp();
    }
  };
  for (int s = 0; s < S - 1; ++s) issue(p0 + s, s);
  float acc = static_cast<float>(lane);
  for (int64_t pg = p0, j = 0; pg < p1; ++pg, ++j) {
    issue(pg + S - 1, static_cast<int>((j + S - 1) % S));
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
    sync();
    const float* st = reinterpret_cast<const float*>(ring + (j % S) * stage_bytes +
                                                     (kPages ? warp * row_bytes : 0));
    float x = st[lane] + st[lane + (kPages ? page_bytes / 4 : 32 * (row_bytes / 16))];
    for (int i = 0; i < chain; ++i) x = fmaf(x, 0.999f, acc);
    acc += x;
    sync();  // the stage is reissued next iteration
  }
  if (acc == 1.2345f) out[0] = 1;
}

template <typename Launch>
double time_us(Launch launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1e3;
}

int main(int argc, char** argv) {
  const bool paged_only = argc > 1 && std::strcmp(argv[1], "paged") == 0;
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  uint8_t* buf = nullptr;
  uint32_t* out = nullptr;
  CHECK(cudaMalloc(&buf, kBytes));
  CHECK(cudaMalloc(&out, 4));
  CHECK(cudaMemset(buf, 0x5a, kBytes));
  auto report = [&](const char* name, double us) {
    std::printf("%-44s %9.1f us  %6.3f TB/s\n", name, us, kBytes / (us * 1e-6) / 1e12);
  };
  char name[96];
  for (int per_sm : {1, 2, 4}) {
    if (paged_only) break;
    for (int threads : {256, 512, 1024}) {
      if (per_sm * threads > 2048) continue;
      const double us = time_us([&] {
        read_ld<<<sms * per_sm, threads>>>(reinterpret_cast<const uint4*>(buf), kBytes / 16, out);
      });
      std::snprintf(name, sizeof name, "ld.v4 x8, %d CTAs/SM x %d threads", per_sm, threads);
      report(name, us);
    }
  }
  CHECK(cudaGetLastError());
  // cp.async, 8 warps a CTA, 8 KB stages (the decode's pattern).
  auto cp_case = [&](auto kernel, int S, int warps, int per_sm) {
    const int smem = S * warps * 8192;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const double us = time_us([&] {
      kernel<<<sms * per_sm, warps * 32, smem>>>(buf, kBytes / 8192, out);
    });
    std::snprintf(name, sizeof name, "cp.async 16B, %d stages x 8 KB, %d warps, %d CTA/SM", S,
                  warps, per_sm);
    report(name, us);
  };
  if (!paged_only) {
    cp_case(read_cp_async_s<3>, 3, 8, 1);
    cp_case(read_cp_async_s<2>, 2, 8, 1);
    cp_case(read_cp_async_s<4>, 4, 6, 1);
    cp_case(read_cp_async_s<3>, 3, 4, 2);
    cp_case(read_cp_async_s<2>, 2, 4, 3);
    cp_case(read_cp_async_s<2>, 2, 3, 4);
  }
  CHECK(cudaGetLastError());
  for (int chunk : {4096, 8192, 16384, 32768}) {
    if (paged_only) break;
    for (int stages : {2, 4, 6, 12}) {
      const int smem = chunk * stages;
      if (smem > 200 * 1024 || stages > 16) continue;
      for (int per_sm : {1, 2}) {
        if (smem * per_sm > 220 * 1024) continue;
        cudaFuncSetAttribute(read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        const double us = time_us([&] {
          read_bulk<<<sms * per_sm, 32, smem>>>(buf, kBytes / chunk, chunk, stages, out);
        });
        std::snprintf(name, sizeof name, "bulk %5d B x %2d stages, %d CTA/SM", chunk, stages,
                      per_sm);
        report(name, us);
      }
    }
  }
  CHECK(cudaGetLastError());

  // The paged decode's pattern (read_paged): the shapes of issue 16 (page 16, 8 or 3 KV heads).
  {
    struct PagedCase { const char* name; int64_t keys; int heads, row_bytes, stages, per_sm; };
    const PagedCase cases[] = {
        {"64x4096 8 heads d128", 64 * 4096, 8, 256, 3, 1},
        {"64x4096 8 heads d128, 2 stages", 64 * 4096, 8, 256, 2, 1},
        {"96x4096 3 heads d64", 96 * 4096, 3, 128, 2, 3},
        {"96x4096 3 heads d64, 5 CTA/SM", 96 * 4096, 3, 128, 2, 5},
        {"96x4096 3 heads d64, 3 st, 5 CTA/SM", 96 * 4096, 3, 128, 3, 5},
        {"256x1024 8 heads d64", 256 * 1024, 8, 128, 2, 1},
        {"256x1024 8 heads d64, 2 CTA/SM", 256 * 1024, 8, 128, 2, 2},
        {"96x4096 3 heads fp8 d64, 3 st", 96 * 4096, 3, 64, 3, 4},
    };
    for (const PagedCase& c : cases) {
      const int64_t pages = c.keys / 16;
      const int64_t cache = pages * 16 * c.heads * c.row_bytes;
      if (2 * cache > kBytes) continue;
      const int smem = c.stages * c.heads * 32 * c.row_bytes;  // either order's ring
      // By warp rows (the decode's order) and by CTA page sweeps.
      auto by_rows = c.stages == 3 ? read_paged<3, false> : read_paged<2, false>;
      auto by_pages = c.stages == 3 ? read_paged<3, true> : read_paged<2, true>;
      auto by_rows_hnd = c.stages == 3 ? read_paged<3, false, true> : read_paged<2, false, true>;
      bool fits = true;
      for (auto kernel : {by_rows, by_pages, by_rows_hnd}) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        int fit = 0;  // a case whose CTAs do not all fit an SM at once would say the wrong thing
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, c.heads * 32, smem));
        fits = fits && fit >= c.per_sm;
      }
      if (!fits) {
        std::printf("paged %-32s skipped: fewer than %d CTAs an SM fit\n", c.name, c.per_sm);
        continue;
      }
      std::vector<int> perm(static_cast<size_t>(pages));
      for (int64_t i = 0; i < pages; ++i) perm[static_cast<size_t>(i)] = static_cast<int>(i);
      int* table = nullptr;
      CHECK(cudaMalloc(&table, pages * sizeof(int)));
      for (int shuffled : {0, 1}) {
        if (shuffled) {
          uint64_t z = 0x9e3779b97f4a7c15ull;  // a fixed Fisher-Yates shuffle (splitmix steps)
          for (int64_t i = pages - 1; i > 0; --i) {
            z += 0x9e3779b97f4a7c15ull;
            uint64_t r = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            r ^= r >> 31;
            std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(r % (i + 1))]);
          }
        }
        CHECK(cudaMemcpy(table, perm.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
        for (int chain : {0, 256, 512, 1024}) {
          for (int sweep : {0, 1, 2}) {
            const auto kernel = sweep == 2 ? by_rows_hnd : sweep ? by_pages : by_rows;
            const double us = time_us([&] {
              kernel<<<sms * c.per_sm, c.heads * 32, smem>>>(buf, buf + cache, table, pages,
                                                            c.row_bytes, chain, out);
            });
            std::printf("paged %-32s %s %s chain %3d %9.1f us  %6.3f TB/s\n", c.name,
                        sweep == 2 ? "warp HND " : sweep ? "cta pages" : "warp rows",
                        shuffled ? "random " : "in order",
                        chain, us, 2 * cache / (us * 1e-6) / 1e12);
          }
        }
      }
      CHECK(cudaFree(table));
    }
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
