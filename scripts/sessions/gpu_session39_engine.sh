#!/usr/bin/env bash
# Session 39, call 2: the decode suite (quick) on the session's final code (the polled and the
# fused merge removed), then issue 20's engine figures on whatever card comes (its targets name
# the H200): nano-vllm's workload with the Qwen3-0.6B shape (random weights) at bf16 (twice)
# and fp8, each with its single stream (128 + 256) and TTFT (4,096); the long workload
# (attention share of the step time); SmolLM2-135M's single stream, twice.
#   run: bash scripts/sessions/gpu_session39_engine.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39c (kvattn, kernels_decode_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39c}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
random_qwen3_06b
random_smollm2
room 300 "qwen3 bf16" && engine_bench q06_bf16_1 /tmp/q06
room 360 "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
room 420 "qwen3 bf16" && engine_bench q06_bf16_2 /tmp/q06
room 450 "long" && engine_bench long /tmp/q06 --workload long --no-compare --json "$OUT/long.json"
for round in 1 2; do
  room 500 "smollm2 single" && single_bench "smol$round" /tmp/smol 128
done
echo "end ${SECONDS}s"
