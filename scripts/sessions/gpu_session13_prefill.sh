#!/usr/bin/env bash
# Session 13, call 3: the Hopper prefill's L2 sections (issue 15). Session 13's ncu (8 x 2048
# 32/8 d128) showed kvattn reading 2x FlashAttention-3's DRAM bytes (26% vs 14% of peak): the
# schedule ran every (sequence, head) pair of one row block before the next row block, so a
# long batch re-read its K/V from DRAM once per row block. Tiles now go section by section
# (prefill_sm90_sections.h; KVATTN_PREFILL_SM90_L2_MB, default 32, 0 = the old order).
# Also: the sampler's walk no longer reads s.target where lane 0 writes it (racecheck
# warnings in session 13's call 2), clusters on by default.
# Prediction: 8 x 2048 d128 +5-10% (DRAM 2x -> ~1x), 1 x 16384 d128 +3-8%, 16 x 1024 and
# d64 4 x 4096 within noise (their K/V already fit in L2).
# Call 3 measured the sections without padding: d128 mixed (8 x 2048 graph +4.7%, flushed 0;
# 1 x 16384 flushed +6.8%, graph -1.3%) and d256 -13/-15%: the persistent grid deals slots
# round robin, and a round holding the light end of one section beside the heavy start of the
# next left CTAs a heavy tile apart (the one-CTA-per-tile grid with sections was fastest at
# d256). Call 4: each section padded to whole rounds of the grid.
#   run: bash scripts/sessions/gpu_session13_prefill.sh > $OUT/summary.txt 2>&1; tail -n 100 $OUT/summary.txt
#   carry: .deps
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench engine_cuda_serving_gpu_test
P=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "1. prefill suite (quick) with the sections, the small-sections test (full), features"
KVATTN_GPU_TEST_QUICK=1 run_test prefill_quick 200 "$P" --gtest_filter='PrefillGpu.*'
run_test prefill_sections 200 "$P" --gtest_filter='PrefillGpu.SmallL2Sections:PrefillGpu.TileEdges:PrefillGpu.LongContext32k:PrefillGpu.Batch256'
KVATTN_GPU_TEST_QUICK=1 run_test prefill_features 200 "$P" --gtest_filter='PrefillGpuFeatures.*'
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.SmallL2Sections' >"$OUT/prefill_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/prefill_$tool.log" | tail -n 1)"
done

step "2. sampler racecheck (clusters on by default now)"
KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
  build-gpu/tests/engine/engine_cuda_serving_gpu_test \
  --gtest_filter='CudaSampling.SplitFormDrawsTheOneCtaTokens' >"$OUT/sampling_racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sampling_racecheck.log" | tail -n 1)"
grep -m3 "Race reported" "$OUT/sampling_racecheck.log"

step "3. prefill timing: default (sections) beside l2off (the old order), noturns, grid"
timeout 150 build-gpu/bench/gpu_prefill_bench --reps 20 >"$OUT/prefill_bench.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench.log" | grep -v "alt_tile\|sm80\|gather" | tail -n 40
timeout 100 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -v "sm80" | tail -n 14
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
