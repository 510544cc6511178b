#!/usr/bin/env bash
# Session 14, calls 4-5: O's rescale between the two GEMMs (issue 15). Call 3's ncu (8 x 2048
# 32/8 d128) had the tensor pipe busy 57% of kvattn's cycles to FA3's 68.5%, and kvattn's
# warps stalled more at the GEMM-turn barriers (1.23 vs 0.83 cycles per instruction): a
# warpgroup's path from its S to its next GEMM issue is what the tensor cores wait on.
# "in_turn" (Tile::kRescaleInTurn, instantiated by the bench only): O *= corr between issuing
# S = Q K^T and O += P V (FA3's order), so the 64 multiplications leave that path.
# Call 4 tried it (and a per-warp skip of the rescale) as run-time switches: ptxas then
# serialised every wgmma (C7520) and all variants ran 20-40% slower; now compile-time.
# Prediction: in_turn +2-5% at d128/d64 if that path binds; err_vs_def ~1e-3 (not bit-equal:
# (O + PV) * c becomes O * c + PV).
#   run: bash scripts/sessions/gpu_session14_rescale.sh > $OUT/summary.txt 2>&1; tail -n 100 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
P=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "1. tests: quick suite, features (quick)"
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 200 "$P" --gtest_filter='PrefillGpu.*'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_features 240 "$P" --gtest_filter='PrefillGpuFeatures.*'

step "2. timing (flushed / graph): default beside in_turn"
timeout 200 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|in_turn|ceiling"
timeout 150 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|in_turn"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
