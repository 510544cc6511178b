#!/usr/bin/env bash
# Written in session 31 without a device: the CUDA model's side of this session's engine work,
# built here (build-carry-s31b, from the commit in its BUILT_FROM), not yet run on a GPU.
#   1. engine_cuda_serving_gpu_test: forward_sample with copy_rows (logprobs, logit_bias and
#      penalties send only the rows that need the host) returns the same bits forward() does,
#      general and fixed (CUDA-graph) steps, and copying rows does not change the draws;
#   2. engine_model_families_gpu_test: Phi-3 (tiny_phi3: fused qkv / gate_up split at load,
#      LongRoPE's short and long lists, window 16) against HF on the GPU, each list applied,
#      graphs on = off at the long context; and the other families, unchanged.
# If both pass: README's Phi-3 row loses "not yet run on a GPU", docs/notes/serve.md's
# DecodeBatch line its "not yet run".
#   run: bash scripts/sessions/gpu_session31_engine.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s31b
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s31b
trap pack_out EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
run_logged serving "$B/engine_cuda_serving_gpu_test"
run_logged families "$B/engine_model_families_gpu_test"
grep -E '^\[phi3' "$OUT/families.log" | head -n 12
echo "end ${SECONDS}s"
