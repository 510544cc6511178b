// Does compute-sanitizer's racecheck take mbarrier waits as ordering? (issue 15: the prefill's
// producer-side tile decode hands a 48-byte tile to the consumers in shared memory, ordered
// only by the q_full / q_empty mbarriers, and racecheck reports 197 hazards on it.)
// One CTA: warp 0's lane 0 writes a 48-byte slot and arrives on `full`; eight consumer warps
// wait on `full`, read the slot, __syncwarp, and lane 0 of each arrives on `empty` (count 8),
// which the producer waits on before the next write; 64 rounds. Modes:
//   0 mbarrier : plain mbarrier.arrive on full (the pattern, without TMA)
//   1 tx       : full armed by arrive.expect_tx and completed by a 256-byte cp.async.bulk (as
//                the prefill's Q load completes q_full)
//   2 named    : the same handoff ordered by named barriers (bar.sync / bar.arrive): control
//   3 st.async : the slot written by st.async (16 bytes a store) completing `full`'s expected
//                transaction bytes, the data and its barrier bound together (the form a remote
//                CTA would use; here the CTA's own shared memory), launched as a 1-CTA cluster
//                (session 17: without the cluster launch st.async is an illegal instruction;
//                with it the hardware does it right, but memcheck calls it an invalid shared
//                write, "Cluster needs to have at least 2 blocks": not a form to ship)
// H200, session 17: modes 0, 1 and 2 report 6 hazards each (racecheck does not take a one-sided
// arrival as ordering), 3 and 4 none; session 22: mode 5 one hazard (the reused slot's rewrite),
// 6 none; memcheck 0 on both; every mode reads right.
//   4 syncthreads : every round's handoff by two __syncthreads (control: what racecheck models)
//   5 bulk     : the slot itself written by a 48-byte cp.async.bulk from a global staging copy
//                (lane 0: st.global, fence.proxy.async.global, the bulk load completing `full`'s
//                transaction bytes): the prefill handover's async-proxy transport (session 22)
//   6 bulk ring: as 5, but each round into a slot of its own (a 64-slot ring: no slot is
//                written twice), which tells a read-then-rewrite hazard from a write-then-read
//                one
// Every consumer checks the rounds it read (a wrong read sets the error word), so the pattern
// is shown right on the hardware whatever racecheck says. Run each mode under racecheck:
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/micro/mbar_handoff_race.cu -o /tmp/mbar_race
//   for m in 0 1 2; do compute-sanitizer --tool racecheck /tmp/mbar_race $m; done
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/hopper/sm90_ptx.cuh"  // the mbarrier wrappers the prefill uses
#include "kernels/cuda/ptx.cuh"              // smem_addr

namespace sm90 = kvattn::cuda::sm90;
namespace ptx = kvattn::cuda::ptx;

constexpr int kConsumerWarps = 8;
constexpr int kRounds = 64;

__device__ __forceinline__ void st_async_v4(uint32_t dst, int a, int b, int c, int d,
                                            uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d), "r"(bar)
      : "memory");
}

__global__ void handoff(int mode, const int4* payload, int4* staging, int* error) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the wrappers exist in the sm_90a device pass only
  __shared__ alignas(16) int ring[kRounds][12];  // modes 5 and 6 (5 uses ring[0] only)
  __shared__ alignas(16) int slot[12];
  __shared__ alignas(128) int4 landing[16];
  __shared__ alignas(8) uint64_t bars[2];
  const uint32_t full = ptx::smem_addr(&bars[0]);
  const uint32_t empty = ptx::smem_addr(&bars[1]);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    sm90::mbar_init(full, 1);
    sm90::mbar_init(empty, kConsumerWarps);
    sm90::fence_barrier_init();
  }
  __syncthreads();
  constexpr int kThreads = 32 * (1 + kConsumerWarps);
  if (warp == 0) {
    for (int r = 0; r < kRounds; ++r) {
      if (mode == 4) {
        if (r > 0) __syncthreads();  // the consumers are done reading
      } else if (mode == 2) {
        if (r > 0) sm90::named_barrier_sync(2, kThreads);  // the consumers are done reading
      } else if (r > 0) {
        sm90::mbar_wait(empty, (r - 1) & 1);
      }
      if (lane == 0) {
        if (mode == 5 || mode == 6) {
          int* dst = ring[mode == 6 ? r : 0];
          int4* stage = staging + 3 * (mode == 6 ? r : 0);
          sm90::fence_proxy_async_global();
          for (int i = 0; i < 3; ++i) {
            const int v = r * 100 + 4 * i;
            stage[i] = make_int4(v, v + 1, v + 2, v + 3);
          }
          sm90::fence_proxy_async_global();
          sm90::mbar_arrive_expect_tx(full, 48);
          sm90::bulk_load(ptx::smem_addr(dst), stage, 48, full);
        } else if (mode == 3) {
          sm90::mbar_arrive_expect_tx(full, 48);
          for (int i = 0; i < 3; ++i) {
            const int v = r * 100 + 4 * i;
            st_async_v4(ptx::smem_addr(&slot[4 * i]), v, v + 1, v + 2, v + 3, full);
          }
        } else {
          for (int i = 0; i < 12; ++i) slot[i] = r * 100 + i;
        }
        if (mode == 1) {
          sm90::mbar_arrive_expect_tx(full, sizeof(landing));
          sm90::bulk_load(ptx::smem_addr(landing), payload, sizeof(landing), full);
        } else if (mode == 0) {
          sm90::mbar_arrive(full);
        }
      }
      if (mode == 2) sm90::named_barrier_arrive(1, kThreads);  // the slot is written
      if (mode == 4) __syncthreads();
      __syncwarp();
    }
  } else {
    for (int r = 0; r < kRounds; ++r) {
      if (mode == 4) {
        if (r > 0) __syncthreads();
        __syncthreads();
      } else if (mode == 2) {
        sm90::named_barrier_sync(1, kThreads);
      } else {
        sm90::mbar_wait(full, r & 1);
      }
      const int* read = mode == 5 ? ring[0] : mode == 6 ? ring[r] : slot;
      int bad = 0;
      for (int i = 0; i < 12; ++i) bad |= read[i] != r * 100 + i;
      if (bad) atomicOr(error, 1);
      __syncwarp();
      if (mode == 4) {
        // the next round's first __syncthreads
      } else if (mode == 2) {
        if (r + 1 < kRounds) sm90::named_barrier_arrive(2, kThreads);
      } else if (lane == 0) {
        sm90::mbar_arrive(empty);
      }
    }
  }
#endif
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  int4* payload = nullptr;
  int4* staging = nullptr;
  int* error = nullptr;
  if (cudaMalloc(&payload, 256) != cudaSuccess || cudaMalloc(&error, 4) != cudaSuccess ||
      cudaMalloc(&staging, 48 * kRounds) != cudaSuccess ||
      cudaMemset(payload, 0, 256) != cudaSuccess || cudaMemset(error, 0, 4) != cudaSuccess) {
    std::printf("CUDA setup failed\n");
    return 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32 * (1 + kConsumerWarps));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 1;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cfg.attrs = &cluster;
  cfg.numAttrs = mode == 3 ? 1 : 0;
  cudaError_t e =
      cudaLaunchKernelEx(&cfg, handoff, mode, static_cast<const int4*>(payload), staging, error);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  int host = -1;
  cudaMemcpy(&host, error, 4, cudaMemcpyDeviceToHost);
  const char* names[] = {"mbarrier", "tx", "named", "st.async", "syncthreads", "bulk", "bulk ring"};
  std::printf("mode %d (%s): %s, wrong reads %s\n", mode, names[mode >= 0 && mode < 7 ? mode : 0], cudaGetErrorString(e),
              host == 0 ? "none" : "SOME");
  return e == cudaSuccess && host == 0 ? 0 : 1;
}
