// Internal: the per-device Model implementations behind Model::create.
#pragma once

#include <memory>

#include "kvattn/engine/model.h"

namespace kvattn {

class Collective;
class NcclComm;

// One rank of a tensor-parallel model (engine/parallel/sharding.h): its weights are the
// shard, `full_vocab` the unsharded vocabulary (its vocab slice starts at rank *
// shard vocab), and `comm` reduces/gathers across the ranks (null when size == 1).
struct RankContext {
  int rank = 0;
  int size = 1;
  int64_t full_vocab = 0;  // 0 => the weights' own vocab (size 1)
  Collective* comm = nullptr;  // CPU ranks
  NcclComm* nccl = nullptr;    // CUDA ranks (any size, 1 included: the TP code path)
};

// Throws naming the first tensor missing from `weights` or shaped unlike the config says.
void check_model_weights(const ModelWeights& weights);

std::unique_ptr<Model> make_cpu_model(ModelWeights weights, const ModelOptions& options,
                                      const RankContext& rank = {});
#ifdef KVATTN_WITH_CUDA
std::unique_ptr<Model> make_cuda_model(ModelWeights weights, Device device,
                                       const ModelOptions& options,
                                       const RankContext& rank = {});
// Free memory on `device` now (cudaMemGetInfo).
int64_t cuda_free_bytes(Device device);
#endif

}  // namespace kvattn
