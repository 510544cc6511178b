#!/usr/bin/env bash
# Session 14, call 4: two exact changes to the Hopper prefill consumers' rescale of O, as
# switches timed side by side (issue 15). Call 3's ncu (8 x 2048 32/8 d128) had the tensor
# pipe busy 57% of kvattn's cycles to FA3's 68.5%, and kvattn's warps stalled more at the
# GEMM-turn barriers (1.23 vs 0.83 cycles per instruction), so a warpgroup's path from its S
# to its next GEMM issue is what the tensor cores wait on.
#   in_turn: O *= corr between issuing S = Q K^T and O += P V (FA3's order): the 64
#            multiplications leave that path (they run under the QK GEMM).
#   skip1:   a warp whose 16 rows kept their maxima skips them (corr == 1 exactly).
# Prediction: in_turn +2-5% at d128/d64 (if the path is what binds), skip1 +1-3% on long rows.
#   run: bash scripts/gpu_session14_rescale.sh > $OUT/summary.txt 2>&1; tail -n 150 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
P=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "1. tests: the rescale modes (full), quick suite, features"
run_test prefill_rescale 240 "$P" --gtest_filter='PrefillGpu.RescaleModes'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 200 "$P" --gtest_filter='PrefillGpu.*'
KVATTN_GPU_TEST_QUICK=1 KVATTN_PREFILL_SM90_RESCALE_IN_TURN=1 KVATTN_PREFILL_SM90_SKIP_RESCALE=1 \
  run_test prefill_features_both 240 "$P" --gtest_filter='PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.RescaleModes' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done

step "2. timing (flushed / graph): default, in_turn, skip1, both"
timeout 200 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|in_turn|skip1|both|ceiling"
timeout 150 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|in_turn|skip1|both"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
