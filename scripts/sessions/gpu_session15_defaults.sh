#!/usr/bin/env bash
# Session 15, call 2 (issue 15): the new prefill defaults (four producer warps for paged pieces,
# the consumers' 32-bit tile decode, O staged through shared memory at d64/d128) under the
# whole prefill GPU suite, memcheck and racecheck, then timed beside each switch turned back.
# Prediction (call 1's variants): page 16 ~590 flushed / ~530 graph; 8x2048 d128 ~530 / ~505;
# 16x1024 ~415 / ~427; every err_vs_def 0.
#   run: bash scripts/sessions/gpu_session15_defaults.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
step "1. tests: the whole prefill suite, features, memcheck/racecheck (quick)"
run_test prefill_full 300 "$P" --gtest_filter='PrefillGpu.*:PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdges*:PrefillGpu.PagedProducerWarps' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done
step "2. timing (flushed / graph): default beside direct_epi, wide, pwarps1"
timeout 150 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|direct_epi|wide|pwarps1|ceiling"
timeout 100 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|wide"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
