// KV pool sizing and storage: how many blocks fit a memory budget, and the one allocation that
// holds every layer's paged K and V caches (nano-vllm's kv_cache tensor).
#pragma once

#include <cstdint>
#include <span>

#include "kvattn/cache/block_manager.h"
#include "kvattn/core/tensor.h"

namespace kvattn {

struct KVCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;
  int64_t block_size = 0;
};

// Bytes one block takes across all layers, K and V:
//   2 * num_layers * block_size * num_kv_heads * head_dim * dtype_size.
// Every field must be > 0 (and the dtype a float type); throws on overflow.
int64_t kv_block_bytes(const KVCacheSpec& spec);

// Blocks that fit in budget_bytes (>= 0): floor(budget_bytes / kv_block_bytes(spec)).
int64_t kv_num_blocks_for_budget(const KVCacheSpec& spec, int64_t budget_bytes);

// Storage [2, num_layers, num_blocks, block_size, num_kv_heads, head_dim] on one device, so each
// layer's k_cache/v_cache is a contiguous [num_blocks, block_size, num_kv_heads, head_dim] view
// (DESIGN §2) to bind to that layer's Attention. Contents start uninitialized.
class KVPool {
 public:
  KVPool(const KVCacheSpec& spec, int64_t num_blocks, Device device = Device::cpu());

  const KVCacheSpec& spec() const { return spec_; }
  int64_t num_blocks() const { return num_blocks_; }
  const Tensor& storage() const { return storage_; }
  TensorView k_cache(int64_t layer) const;
  TensorView v_cache(int64_t layer) const;

  // Performs fork's copy-on-write: block dst := block src in every layer, K and V. Each id
  // must be in range, src != dst, and no dst may repeat or also be a src (the order of the
  // copies would matter). Synchronous; on a CUDA pool it issues one copy per block per layer
  // (a batched copy kernel belongs in the kernels layer).
  void copy_blocks(std::span<const BlockCopy> copies) const;

 private:
  TensorView layer_view(int64_t kv, int64_t layer) const;

  KVCacheSpec spec_;
  int64_t num_blocks_;
  Tensor storage_;
};

}  // namespace kvattn
