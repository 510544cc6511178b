#!/usr/bin/env bash
# Session 14, call 6: the rescale-in-turn order as the default tile (call 5 timed it as the
# bench's "in_turn": bit-identical outputs, 1-13% faster); the correctness suite on it.
#   run: bash scripts/sessions/gpu_session14_final.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
step build
kvattn_gpu_build OFF kernels_prefill_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
step "tests: quick suite, tile edges (full), features (quick), memcheck, racecheck"
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 150 "$P" --gtest_filter='PrefillGpu.*'
run_test prefill_edges 150 "$P" --gtest_filter='PrefillGpu.TileEdges*'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_features 150 "$P" --gtest_filter='PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdgesHeadDim256' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done
