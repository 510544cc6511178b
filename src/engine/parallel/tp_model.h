// Internal: a tensor-parallel model: N rank models (each built from its shard of the weights,
// engine/parallel/sharding.h) that run every step together, one thread per rank. The engine
// sees one Model with the full config: the scheduler runs once, and each step's host
// metadata is handed to every rank (the broadcast); rank 0's logits (or tokens) are returned,
// which every rank holds after the gather.
//
// KV cache: each rank holds num_kv_heads / N heads of every block, in a pool of the same
// block count, so one BlockManager serves all ranks; kv_block_bytes() (full config) is the
// bytes of one block summed over the ranks.
#pragma once

#include <memory>

#include "kvattn/engine/model.h"

namespace kvattn {

// options.tensor_parallel ranks (>= 1; Model::create uses this for >= 2, tests also for 1,
// which runs the whole tensor-parallel path with one rank). CPU: ranks are threads sharing
// host memory. CUDA: rank r runs on device.index + r, with NCCL. Throws kvattn::Error when the
// size does not divide the heads, the KV heads or the MLP width, exceeds the visible GPUs, or
// the build has no NCCL.
std::unique_ptr<Model> make_tensor_parallel_model(ModelWeights weights, Device device,
                                                  const ModelOptions& options);

}  // namespace kvattn
