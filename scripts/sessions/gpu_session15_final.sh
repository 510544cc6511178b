#!/usr/bin/env bash
# Session 15, call 4 (issue 15): GEMM turns across tiles at head_dim 64 (three consumer
# warpgroups, plain kernels; was two-warpgroup tiles only), under the whole prefill GPU suite
# and the sanitizers, timed beside "noturns"; then the engine's time to first token for a
# 4096-token prompt (Qwen3-0.6B shape) with the sm_80 and the Hopper prefill, alternating.
# Prediction: d64 8x2048 32/8 +1-4% (11 row blocks a sequence: a tile boundary every ~6 key
# tiles), 4x4096 9/3 +0-2%; d128 unchanged; TTFT 4096 ~11 ms Hopper (session 12: 11.4-11.6).
#   run: bash scripts/sessions/gpu_session15_final.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench kvattn_cli
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
step "1. tests: the whole prefill suite, features, memcheck/racecheck (quick)"
run_test prefill_full 200 "$P" --gtest_filter='PrefillGpu.*:PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.RandomSweep' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done
step "2. timing (flushed / graph): default beside noturns, wide, direct_epi"
timeout 150 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|noturns|ceiling"
step "3. engine: time to first token, 4096-token prompt (sm_80 vs Hopper prefill)"
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 \
  2>&1 | tail -n 1
for round in 1 2; do
  for sm90 in 0 1; do
    KVATTN_PREFILL_SM90=$sm90 timeout 60 build-gpu/kvattn bench --model /tmp/q06 --device cuda \
      --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
      --single-input 128 --single-output 32 --ttft-input 4096 \
      --json "/tmp/engine_sm90_${sm90}_r${round}.json" >"/tmp/engine_sm90_${sm90}_r${round}.log" 2>&1
    echo "round $round KVATTN_PREFILL_SM90=$sm90 rc=$?: $(grep "time to first token" "/tmp/engine_sm90_${sm90}_r${round}.log" || tail -n 3 "/tmp/engine_sm90_${sm90}_r${round}.log")"
  done
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
