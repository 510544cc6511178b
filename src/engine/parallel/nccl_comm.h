// Internal: NCCL communicators for tensor parallelism inside one process (one thread per GPU,
// as vLLM's and SGLang's single-node TP). Built when NCCL was found (KVATTN_WITH_NCCL).
//
// NVLink multicast (NVLS) stays off: create() sets NCCL_NVLS_ENABLE=0 in the process
// environment before any communicator exists, so NCCL and any child process inherit it.
#pragma once

#ifdef KVATTN_WITH_NCCL

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvattn/core/dtype.h"

namespace kvattn {

class NcclComm {
 public:
  // One communicator per device, ranks in the order given (ncclCommInitAll). Throws
  // kvattn::Error naming the device when one is not visible or NCCL fails.
  static std::vector<std::unique_ptr<NcclComm>> create(std::span<const int> devices);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // In place: buf := sum over ranks of buf (count elements of dtype: f32, f16 or bf16).
  void all_reduce_sum(void* buf, int64_t count, DType dtype, cudaStream_t stream);
  // recv [size, count] := every rank's send [count], in rank order.
  void all_gather(const void* send, void* recv, int64_t count, DType dtype, cudaStream_t stream);

  // Collectives issued by the ranks' threads between group_start() and group_end() are
  // launched together (needed when one thread drives several ranks).
  static void group_start();
  static void group_end();

 private:
  NcclComm(void* comm, int rank, int size, int device);
  void* comm_;  // ncclComm_t
  int rank_, size_, device_;
};

}  // namespace kvattn

#endif  // KVATTN_WITH_NCCL
