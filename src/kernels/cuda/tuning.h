// Process-wide switches for kernel variants, so that a benchmark (or a user) can time them
// beside the default in one run. The defaults are the variants measured best on the H200
// (docs/perf/NOTES.md, "CUDA store_kv and decode"). Initialised once from the environment;
// the benchmark and the tests set them directly. Not thread-safe to change while kernels are
// being launched from other threads.
#pragma once

namespace kvattn::cuda {

struct CudaTuning {
  // Decode kernel: 2 = multi-head CTAs with per-warp pipelines and stream-K ranges (default),
  // 1 = the first kernel (one CTA per sequence x split x KV head). Env KVATTN_DECODE_KERNEL.
  int decode_kernel = 2;
  // v2: most KV heads one CTA holds (one warp each). Env KVATTN_DECODE_HEADS_PER_CTA.
  int decode_heads_per_cta = 8;
  // v2: pipeline stages per warp (0: as many as ~192 KB per CTA of 8 warps allow).
  // Env KVATTN_DECODE_STAGES.
  int decode_stages = 0;
  // v2: launch the merge kernel with programmatic dependent launch. Env KVATTN_DECODE_PDL.
  bool decode_pdl = true;
  // v1: prefetch this many key tiles into L2 beyond the shared-memory pipeline (0: off).
  // Env KVATTN_DECODE_L2_PREFETCH.
  int decode_l2_prefetch_tiles = 0;
  // store_kv: load a token's K/V rows before its slot is known (overlaps the two loads).
  // Env KVATTN_STORE_KV_EARLY_LOADS=1.
  bool store_kv_early_loads = false;
  // store_kv: tokens (row parts) per warp, all loaded before any is stored (1 or 2).
  // Env KVATTN_STORE_KV_TOKENS_PER_WARP.
  int store_kv_tokens_per_warp = 1;
  // store_kv: streaming (evict-first) stores into the cache. Env KVATTN_STORE_KV_STREAM_STORES.
  bool store_kv_stream_stores = false;
};

CudaTuning& cuda_tuning();

}  // namespace kvattn::cuda
