#!/usr/bin/env bash
# Session 14, call 1: the Hopper prefill's GEMM issue (issue 15) and the head_dim 256 tile
# (issue 18). Static SASS counts (cuobjdump, here): the instructions between a consumer's turn
# barrier and its wgmma wait fell from 124-136 to 90-94 per key tile at head_dim 128 (the
# descriptors are one add on the low word, sm90_ptx.cuh SmemDescSw128), 91-94 -> 53-64 at 64;
# session 13's ncu had kvattn issuing 184M warp instructions to FA3's 164.5M at 8 x 2048 d128,
# ~20M of them this rebuilding. head_dim 256 tiles: 128 x 64 -> 128 x 80 keys (FA3's shape);
# paged K/V in TMA boxes of gcd(page, key tile) keys (page 48 at d128 and every multiple of 8
# at d256 now take the Hopper kernel).
# Predictions: d128 and d64 +3-6% (fewer instructions on the turn-holding path), d256 +5-10%.
#   run: bash scripts/sessions/gpu_session14_prefill.sh > $OUT/summary.txt 2>&1; tail -n 120 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
P=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "1. prefill tests: quick suite, tile edges (d64/128 and d256) full, features"
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 200 "$P" --gtest_filter='PrefillGpu.*'
run_test prefill_edges 240 "$P" --gtest_filter='PrefillGpu.TileEdges*:PrefillGpu.SmallL2Sections'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_features 240 "$P" --gtest_filter='PrefillGpuFeatures.*'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdgesHeadDim256' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done

step "2. prefill timing (flushed / graph), default shapes then head_dim 256"
timeout 150 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -v "sm80\|gather" | tail -n 40
timeout 100 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | tail -n 16
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
