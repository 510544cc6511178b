#!/usr/bin/env bash
# Session 23, call 5: the session's final tree (the kMods handover at head_dim 128, the decode
# kernels in one translation unit per family) through the GPU suites that run prefill and
# decode: kernels (decode in full, prefill, store_kv, merge), the cascade layer, and the
# engine's model, PDL, serving and cascade tests.
#   run: bash scripts/sessions/gpu_session23_final.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-s23e (those test binaries; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23e
trap pack_out EXIT
for t in kernels_decode_gpu_test kernels_prefill_gpu_test kernels_store_kv_gpu_test \
         kernels_merge_attention_gpu_test attention_attention_cascade_gpu_test \
         engine_model_gpu_test engine_pdl_gpu_test engine_serving_gpu_test \
         engine_cascade_decode_gpu_test; do
  room 280 "$t" || continue
  run_logged "$t" "$B/$t"
done
echo "end ${SECONDS}s"
