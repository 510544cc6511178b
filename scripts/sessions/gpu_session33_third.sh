#!/usr/bin/env bash
# Session 33, call 3: how fast the engine's decode attention reads K/V on nano-vllm's workload
# (issue 20's 30k: decode steps are ~65% attention). `kvattn bench` now counts each decode
# step's attended keys (GenerationStats' attended_keys x LLM::kv_bytes_per_token): the rate
# over the attention phase with --breakdown (eager, per-phase events), over the model time with
# graphs. Random Qwen3-0.6B, bf16 and fp8 caches; the kernel bench's uniform shapes read
# 2.89 TB/s (bf16) on this card in call 2's same-run table.
#   run: bash scripts/sessions/gpu_session33_third.sh > $OUT/summary.txt 2>&1
#   carry: build-carry-s33b (kvattn with the attended-keys counters; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s33b
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
random_qwen3_06b
run_bench() {  # LABEL KV [ARGS...]
  local label=$1 kv=$2; shift 2
  timeout 90 "$B/kvattn" bench --model /tmp/q06 --device cuda --kv-cache-dtype "$kv" \
    --no-compare --single-input 16 --single-output 8 --ttft-input 64 \
    --json "$OUT/bench_$label.json" "$@" >"$OUT/bench_$label.log" 2>&1
  echo "$label rc=$?: $(tr '\r' '\n' < "$OUT/bench_$label.log" |
    grep -E "Throughput|decode steps|decode K/V|rror" | tr '\n' ' ')"
}
run_bench bf16_graph bf16
run_bench bf16_breakdown bf16 --breakdown
run_bench fp8_graph fp8
run_bench fp8_breakdown fp8 --breakdown
echo "end ${SECONDS}s"
