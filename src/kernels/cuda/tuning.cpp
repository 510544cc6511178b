#include "kernels/cuda/tuning.h"

#include <algorithm>
#include <cstdlib>

namespace kvattn::cuda {

CudaTuning& cuda_tuning() {
  static CudaTuning tuning = [] {
    CudaTuning t;
    if (const char* v = std::getenv("KVATTN_DECODE_L2_PREFETCH")) {
      t.decode_l2_prefetch_tiles = std::max(0, std::atoi(v));
    }
    if (const char* v = std::getenv("KVATTN_STORE_KV_EARLY_LOADS")) {
      t.store_kv_early_loads = std::atoi(v) != 0;
    }
    return t;
  }();
  return tuning;
}

}  // namespace kvattn::cuda
