// Internal: fork's copy-on-write on a CUDA KVPool in one kernel launch. Every (src, dst) pair,
// every layer, K and V: one CTA copies one block with 16-byte loads and stores (2-byte ones
// when a block is not a multiple of 16 bytes). Asynchronous on the caller's stream: a forward
// on the same stream sees the copies.
#pragma once

#ifdef KVATTN_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kvattn/cache/block_manager.h"
#include "kvattn/cache/kv_pool.h"

namespace kvattn::cuda_model {

class KVBlockCopier {
 public:
  KVBlockCopier() = default;
  ~KVBlockCopier();
  KVBlockCopier(const KVBlockCopier&) = delete;
  KVBlockCopier& operator=(const KVBlockCopier&) = delete;

  // Validates every pair first (ids in [0, num_blocks), src != dst, no dst twice, no dst that
  // is also a src: KVPool::copy_blocks' rules), throwing kvattn::Error naming the bad entry
  // and copying nothing; then uploads the pairs (pinned staging, one copy) and launches the
  // kernel on `stream`. No host sync (the staging is reused only after the previous upload
  // completed), no allocation once the buffers fit.
  void run(const KVPool& pool, std::span<const BlockCopy> copies, cudaStream_t stream,
           const char* fn = "Model::copy_kv_blocks");

 private:
  std::vector<uint8_t> role_;  // per block: bit 0 src, bit 1 dst; all zero between calls
  int32_t* pinned_ = nullptr;
  int32_t* device_ = nullptr;
  int64_t capacity_ = 0;  // pairs
  cudaEvent_t uploaded_ = nullptr;
  int device_index_ = -1;
};

}  // namespace kvattn::cuda_model

#endif  // KVATTN_WITH_CUDA
