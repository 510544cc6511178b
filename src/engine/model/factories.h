// Internal: the per-device Model implementations behind Model::create.
#pragma once

#include <memory>

#include "kvattn/engine/model.h"

namespace kvattn {

// Throws naming the first tensor missing from `weights` or shaped unlike the config says.
void check_model_weights(const ModelWeights& weights);

std::unique_ptr<Model> make_cpu_model(ModelWeights weights, const ModelOptions& options);
#ifdef KVATTN_WITH_CUDA
std::unique_ptr<Model> make_cuda_model(ModelWeights weights, Device device,
                                       const ModelOptions& options);
// Free memory on `device` now (cudaMemGetInfo).
int64_t cuda_free_bytes(Device device);
#endif

}  // namespace kvattn
