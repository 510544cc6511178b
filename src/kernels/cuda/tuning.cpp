#include "kernels/cuda/tuning.h"

#include <algorithm>
#include <cstdlib>

namespace kvattn::cuda {
namespace {

void from_env(const char* name, int& value, int lo, int hi) {
  if (const char* v = std::getenv(name)) value = std::clamp(std::atoi(v), lo, hi);
}

}  // namespace

CudaTuning& cuda_tuning() {
  static CudaTuning tuning = [] {
    CudaTuning t;
    from_env("KVATTN_PREFILL_SM90", t.prefill_sm90, 0, 1);
    from_env("KVATTN_PREFILL_SM90_PERSISTENT", t.prefill_sm90_persistent, 0, 1);
    from_env("KVATTN_PREFILL_SM90_PAGED_GATHER", t.prefill_sm90_paged_gather, 0, 1);
    from_env("KVATTN_PREFILL_SM90_TURNS", t.prefill_sm90_turns, 0, 1);
    from_env("KVATTN_PREFILL_SM90_PRODUCER_WARPS", t.prefill_sm90_producer_warps, 1, 4);
    from_env("KVATTN_PREFILL_SM90_NARROW_DECODE", t.prefill_sm90_narrow_decode, 0, 1);
    from_env("KVATTN_PREFILL_SM90_HANDOVER", t.prefill_sm90_handover, 0, 2);
    from_env("KVATTN_PREFILL_SM90_MODS_HANDOVER", t.prefill_sm90_mods_handover, 0, 3);
    from_env("KVATTN_PREFILL_SM90_DYNAMIC", t.prefill_sm90_dynamic, 0, 2);
    from_env("KVATTN_PREFILL_SM90_DYNAMIC_MIN_ROUNDS", t.prefill_sm90_dynamic_min_rounds, 1,
             1 << 20);
    from_env("KVATTN_PREFILL_SM90_L2_MB", t.prefill_sm90_l2_mb, 0, 1 << 20);
    from_env("KVATTN_DECODE_HEADS_PER_CTA", t.decode_heads_per_cta, 1, 8);
    from_env("KVATTN_DECODE_STAGES", t.decode_stages, 0, 8);
    from_env("KVATTN_DECODE_D64_STAGES", t.decode_d64_stages, 2, 8);
    from_env("KVATTN_DECODE_SMALL", t.decode_small, 0, 1);
    from_env("KVATTN_DECODE_SWAP", t.decode_swap, -1, 1);
    from_env("KVATTN_DECODE_SMALL_WARPS", t.decode_small_warps, 0, 8);
    from_env("KVATTN_DECODE_SMALL_MAX_CHUNKS", t.decode_small_max_chunks, 0, 1024);
    from_env("KVATTN_DECODE_SMALL_CHUNKS", t.decode_small_chunks, 0, 1024);
    from_env("KVATTN_DECODE_KV_EVICT_FIRST", t.decode_kv_evict_first, -1, 1);
    from_env("KVATTN_DECODE_SMALL_INTERLEAVE", t.decode_small_interleave, 0, 1);
    from_env("KVATTN_DECODE_SMALL_MIN_TILES", t.decode_small_min_tiles, 0, 1 << 16);
    from_env("KVATTN_DECODE_SMALL_D64_MAX_MB", t.decode_small_d64_max_mb, 0, 1 << 20);
    from_env("KVATTN_DECODE_SMALL_MIN_CHUNKS", t.decode_small_min_chunks, 1, 64);
    from_env("KVATTN_DECODE_SMALL_ONE_WAVE", t.decode_small_one_wave, 0, 1);
    from_env("KVATTN_DECODE_UNIFORM_ONE_CHUNK", t.decode_uniform_one_chunk, 0, 1);
    from_env("KVATTN_DECODE_LEAN_ISSUE", t.decode_lean_issue, -1, 1);
    from_env("KVATTN_DECODE_TMA", t.decode_tma, -1, 1);
    from_env("KVATTN_DECODE_CTA_SWEEP", t.decode_cta_sweep, 0, 1);
    from_env("KVATTN_DECODE_STREAM_WAVES", t.decode_stream_waves, 1, 8);
    from_env("KVATTN_DECODE_DYNAMIC_SPLIT", t.decode_dynamic_split, 0, 1);
    from_env("KVATTN_DECODE_TMA_PREFETCH", t.decode_tma_prefetch, 0, 1);
    from_env("KVATTN_DECODE_FP8_HW_CVT", t.decode_fp8_hw_cvt, 0, 1);
    from_env("KVATTN_DECODE_FP8_Q_F16", t.decode_fp8_q_f16, 0, 1);
    from_env("KVATTN_DECODE_PDL_TRIGGER", t.decode_pdl_trigger, 0, 1);
    from_env("KVATTN_DECODE_MERGE_PDL", t.decode_merge_pdl, 0, 1);
    from_env("KVATTN_STORE_KV_VARIANT", t.store_kv_variant, 0, 2);
    from_env("KVATTN_FP8_EXTENDED_FORMS", t.fp8_extended_forms, 0, 1);
    from_env("KVATTN_FP8_PADDED_DECODE", t.fp8_padded_decode, 0, 1);
    return t;
  }();
  return tuning;
}

}  // namespace kvattn::cuda
