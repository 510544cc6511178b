#!/usr/bin/env bash
# Session 38, call 4: after the dynamic split's code left the default kernels (call 3), the
# decode bench's whole variant map at both head_dim 64 acceptance shapes (96x4096 9/3 and
# 256x1024 8/8, page 16; "dynamic" rows now run the static split), and the engine's figures of
# issues 16 and 20 with this build: nano-vllm's workload (random Qwen3-0.6B) bf16 and fp8,
# then its single stream (128 + 256) and time to first token (4,096 tokens).
#   run: bash scripts/sessions/gpu_session38_map.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38c (gpu_decode_bench, kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38c}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
timeout 200 "$B/gpu_decode_bench" --only d64s > "$OUT/bench_d64s.txt" 2>&1
echo "bench d64s rc=$?"
grep -o '"op": "[^"]*", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_d64s.txt" |
  sed 's/"op": //; s/"shape": //; s/"us": //' | sort -t, -k2,2 -k3n | head -150
random_qwen3_06b
engine() {  # LABEL ARGS...
  local label=$1; shift
  timeout 150 "$B/kvattn" bench --model /tmp/q06 --device cuda "$@" > "$OUT/engine_$label.log" 2>&1
  echo "engine $label rc=$?: $(tr '\r' '\n' < "$OUT/engine_$label.log" |
    grep -E "Throughput|single stream|first token|decode K/V|KV pool|rror" | tr '\n' ' ')"
}
room 420 "engine bf16" && engine bf16
room 480 "engine fp8" && engine fp8 --kv-cache-dtype fp8
echo "end ${SECONDS}s"
