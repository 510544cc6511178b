#!/usr/bin/env bash
# Issue 20's bench figures in one call on the GPU machine (written without a GPU; not yet run):
# builds the command line and the phase-timing GPU test, runs that test, makes the random
# Qwen3-0.6B-shaped checkpoint, then `kvattn bench` with CUDA graphs on the three workloads
# (nano-vllm, prefix: cache on and off in the same call, long), and each again with
# --breakdown (eager steps, per-phase split). Prints the throughput, hit rate, cache on/off
# ratio and breakdown lines; JSON under $OUT.   run: bash scripts/gpu_bench_workloads.sh
# (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build OFF engine_phase_timing_gpu_test kvattn_cli

step "phase timing test"
timeout 300 build-gpu/tests/engine/engine_phase_timing_gpu_test 2>&1 | tail -n 12

step "checkpoint"
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 2

for w in nano-vllm prefix long; do
  for mode in graphs breakdown; do
    step "bench --workload $w ($mode)"
    extra=()
    [ "$mode" = breakdown ] && extra=(--breakdown)
    timeout 600 build-gpu/kvattn bench --model /tmp/q06 --device cuda --workload "$w" \
      "${extra[@]}" --json "$OUT/bench_${w}_${mode}.json" 2>&1 | tr '\r' '\n' |
      grep -E "workload|Throughput|steps|prefix cache|single|first token|kv cache|rror"
  done
done
