#!/usr/bin/env bash
# Session 32, call 1: the engine (issue 20 / issue 16's engine rows) on the card lent, from
# binaries built here at 9db6ebb (session 31's final code; the engine was not timed then).
#   1. random Qwen3-0.6B: `kvattn bench` (nano-vllm's workload, single stream 128 + 256, TTFT
#      4096) at bf16 and at fp8, twice each, alternating;
#   2. the default model's shape (SmolLM2-135M, random Llama weights: CUDA dequantises GGUF
#      to bf16, so this is the same network; the 98 MB GGUF is over the carry) the same way:
#      issue 20's ">= 2,000 tok/s single stream", last measured in session 12 (917);
#   3. engine_cuda_serving_gpu_test (session 31 changed its step counters, not yet run).
#   run: bash scripts/sessions/gpu_session32_first.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s32a (kvattn, engine_cuda_serving_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s32a
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape smollm2-135m \
  --out /tmp/smol 2>&1 | tail -n 1)
bench_line() {  # LABEL MODEL KV
  timeout 120 "$B/kvattn" bench --model "$2" --device cuda --kv-cache-dtype "$3" \
    --json "$OUT/bench_$1.json" >"$OUT/bench_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/bench_$1.log" |
    grep -E "Throughput|KV pool|single|first token|leak|rror" | tr '\n' ' ')"
}
for r in 1 2; do
  for kv in bf16 fp8; do
    room 420 "q06 $kv r$r" && bench_line "q06_${kv}_r$r" /tmp/q06 $kv
    room 440 "smol $kv r$r" && bench_line "smol_${kv}_r$r" /tmp/smol $kv
  done
done
room 480 "serving test" && run_logged serving "$B/engine_cuda_serving_gpu_test"
echo "end ${SECONDS}s"
