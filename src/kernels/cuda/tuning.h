// Process-wide switches for kernel variants that are built in but not yet the default, so a
// benchmark (or a user) can time them beside the default in one run. The defaults are the
// variants verified and measured on the H200 (docs/perf/NOTES.md, "CUDA store_kv and decode").
// Initialised once from the environment; the benchmark sets them directly. Not thread-safe to
// change while kernels are being launched from other threads.
#pragma once

namespace kvattn::cuda {

struct CudaTuning {
  // Decode: besides the shared-memory pipeline, prefetch this many further key tiles into L2
  // (0: off). Env KVATTN_DECODE_L2_PREFETCH.
  int decode_l2_prefetch_tiles = 0;
  // store_kv: load a token's K/V rows before its slot is known (overlaps the two loads).
  // Env KVATTN_STORE_KV_EARLY_LOADS=1.
  bool store_kv_early_loads = false;
};

CudaTuning& cuda_tuning();

}  // namespace kvattn::cuda
