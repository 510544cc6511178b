#!/usr/bin/env bash
# Session 38, call 7: issue 20's engine figures on whatever card comes (asked for the H200 its
# targets name): nano-vllm's workload with the Qwen3-0.6B shape (random weights) at bf16 and
# fp8, each with its single stream (128 + 256) and time to first token (4,096), then
# SmolLM2-135M's single stream, two rounds.
#   run: bash scripts/sessions/gpu_session38_engine.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38e (kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38e}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
random_smollm2
engine() {  # LABEL MODEL ARGS...
  local label=$1 model=$2; shift 2
  timeout 150 "$B/kvattn" bench --model "$model" --device cuda "$@" > "$OUT/engine_$label.log" 2>&1
  echo "engine $label rc=$?: $(tr '\r' '\n' < "$OUT/engine_$label.log" |
    grep -E "Throughput|single stream|first token|decode K/V|KV pool|rror" | tr '\n' ' ')"
}
room 300 "qwen3 bf16" && engine q06_bf16 /tmp/q06
room 360 "qwen3 fp8" && engine q06_fp8 /tmp/q06 --kv-cache-dtype fp8
for round in 1 2; do
  room 420 "smollm2 single" && single_bench "smol$round" /tmp/smol 128
  room 440 "qwen3 single" && single_bench "q06_$round" /tmp/q06 128
done
echo "end ${SECONDS}s"
