#!/usr/bin/env bash
# Session 39, call 7: issue 20's prefix workload (256 requests sharing a 2,000-token system
# prompt; the run with the prefix cache off follows in the same process) on the final code,
# then nano-vllm's workload with the per-phase breakdown (eager steps: the attention share).
#   run: bash scripts/sessions/gpu_session39_prefix.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39c (kvattn, kernels_decode_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39c}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
room 300 "prefix" && ENGINE_TIMEOUT=200 engine_bench prefix /tmp/q06 --workload prefix --json "$OUT/prefix.json"
room 420 "breakdown" && ENGINE_TIMEOUT=200 engine_bench nanovllm_breakdown /tmp/q06 --breakdown --json "$OUT/nanovllm_breakdown.json"
echo "end ${SECONDS}s"
