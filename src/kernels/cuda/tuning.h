// Process-wide switches for kernel variants, so that a benchmark (or a user) can time them
// beside the default in one run. The defaults are the variants measured best on the H200
// (docs/perf/NOTES.md, "CUDA store_kv and decode"). Initialised once from the environment;
// the benchmark and the tests set them directly. Not thread-safe to change while kernels are
// being launched from other threads.
#pragma once

namespace kvattn::cuda {

struct CudaTuning {
  // Decode: most KV heads one CTA holds (one warp each). Env KVATTN_DECODE_HEADS_PER_CTA.
  int decode_heads_per_cta = 8;
  // Decode: pipeline stages per warp (0: as many as ~192 KB per CTA of 8 warps allow).
  // Env KVATTN_DECODE_STAGES.
  int decode_stages = 0;
};

CudaTuning& cuda_tuning();

}  // namespace kvattn::cuda
