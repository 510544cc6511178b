#include "kernels/cuda/tuning.h"

#include <algorithm>
#include <cstdlib>

namespace kvattn::cuda {
namespace {

void from_env(const char* name, int& value, int lo, int hi) {
  if (const char* v = std::getenv(name)) value = std::clamp(std::atoi(v), lo, hi);
}
void from_env(const char* name, bool& value) {
  if (const char* v = std::getenv(name)) value = std::atoi(v) != 0;
}

}  // namespace

CudaTuning& cuda_tuning() {
  static CudaTuning tuning = [] {
    CudaTuning t;
    from_env("KVATTN_DECODE_KERNEL", t.decode_kernel, 1, 2);
    from_env("KVATTN_DECODE_HEADS_PER_CTA", t.decode_heads_per_cta, 1, 8);
    from_env("KVATTN_DECODE_STAGES", t.decode_stages, 0, 8);
    from_env("KVATTN_DECODE_PDL", t.decode_pdl);
    from_env("KVATTN_DECODE_L2_PREFETCH", t.decode_l2_prefetch_tiles, 0, 64);
    from_env("KVATTN_STORE_KV_EARLY_LOADS", t.store_kv_early_loads);
    from_env("KVATTN_STORE_KV_TOKENS_PER_WARP", t.store_kv_tokens_per_warp, 1, 2);
    from_env("KVATTN_STORE_KV_STREAM_STORES", t.store_kv_stream_stores);
    return t;
  }();
  return tuning;
}

}  // namespace kvattn::cuda
