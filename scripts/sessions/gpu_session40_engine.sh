#!/usr/bin/env bash
# Session 40, call 3: the fp8 d64 change in the engine and the lone-sequence question of call 1.
# SmolLM2-135M's single stream (the default model's head shape, 9/3 d64: the small kernel) over
# an fp8 cache with bf16 queries in f16 (the new default at d64) and kept in bf16
# (KVATTN_DECODE_FP8_Q_F16=0), alternating, and over bf16; the lone 8192-key rows of
# `gpu_decode_bench --only fp8` the same two ways; then nano-vllm's workload (Qwen3-0.6B shape)
# at bf16 and fp8 and the long workload, on the session's build.
#   run: bash scripts/sessions/gpu_session40_engine.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s40b (kvattn, gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s40b}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
random_smollm2
smol() {  # LABEL DTYPE [ENV=VALUE...]: SmolLM2's single stream (128 + 256 tokens)
  local label=$1 dtype=$2; shift 2
  env KVATTN_NOTHING=0 "$@" timeout 60 "$B/kvattn" bench --model /tmp/smol --device cuda \
    --no-compare --num-seqs 1 --min-input 16 --max-input 16 --min-output 4 --max-output 4 \
    --single-input 128 --single-output 256 --kv-cache-dtype "$dtype" >"$OUT/ss_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/ss_$label.log" | grep -E "single stream|rror" | tr '\n' ' ')"
}
for round in 1 2; do
  smol "fp8_qf16_$round" fp8
  smol "fp8_qbf16_$round" fp8 KVATTN_DECODE_FP8_Q_F16=0
  smol "bf16_$round" bf16
done
rows="^decode default +1x8192"
for round in 1 2; do
  room 200 "bench" && bench_rows "qf16_$round" gpu_decode_bench "$rows" --only fp8 --variants default
  room 220 "bench" && KVATTN_DECODE_FP8_Q_F16=0 bench_rows "qbf16_$round" gpu_decode_bench "$rows" \
    --only fp8 --variants default
done
room 330 "qwen3 bf16" && engine_bench q06_bf16 /tmp/q06
room 400 "qwen3 fp8" && engine_bench q06_fp8 /tmp/q06 --kv-cache-dtype fp8
room 450 "long" && engine_bench long /tmp/q06 --workload long --no-compare --json "$OUT/long.json"
echo "end ${SECONDS}s"
