#!/usr/bin/env bash
# Next session, call 1 (issue 15): session 14's final prefill code timed, and three K/V stages
# at d128 with the in-turn rescale (the bench's alt_tile), beside the old rescale order; and
# paged pieces issued by four producer warps (pwarps4, KVATTN_PREFILL_SM90_PRODUCER_WARPS=4;
# written in session 14 without device time: its test runs first).
# Then call 2: `PREFILL_PEERS_BACKENDS=fa3 PEERS_TIMEOUT=400 bash scripts/gpu_prefill_peers.sh`
# (carry .deps .peers) for the same-run ratios session 14 could only estimate.
# Prediction: default d128 ~0.93-0.99 of FA3 (docs/notes/hopper-prefill-next.md); alt_tile
# +2-6% over default on the long d128 shapes and page 16; pwarps4 +5-15% at page 16 (a tile's
# 16 boxes issued by four warps instead of one lane loop), nothing at page 256; smem_epi (O
# staged by stmatrix, 16-byte coalesced stores; err_vs_def must be 0) +1-3% on short-row
# shapes (16x1024, 8x2048), where a warpgroup's epilogue sits between two tiles' GEMMs;
# "narrow" (the consumers' 32-bit tile decode) +1-4% on short-row shapes.
#   run: bash scripts/sessions/gpu_session15_first.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
P=build-gpu/tests/kernels/kernels_prefill_gpu_test
step "1. tests: producer warps (full), quick suite, features (quick), memcheck/racecheck"
run_test prefill_pwarps 200 "$P" --gtest_filter='PrefillGpu.PagedProducerWarps:PrefillGpu.NarrowTileDecode'
for tool in memcheck racecheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.PagedProducerWarps' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 200 "$P" --gtest_filter='PrefillGpu.*'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_features 240 "$P" --gtest_filter='PrefillGpuFeatures.*'
step "2. timing (flushed / graph): default, alt_tile (3 stages), rescale_after"
timeout 200 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -E "shape|default|alt_tile|rescale_after|smem_epi|narrow|pwarps4|ceiling"
timeout 150 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|rescale_after|narrow|pwarps4"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
