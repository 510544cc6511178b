#!/usr/bin/env bash
# Issue 18 on the CUDA prefill, in one GPU call: builds the prefill GPU suite and the feature
# benchmark, runs the whole suite (full cases: the old tests and PrefillGpuFeatures: window x
# causal x GQA x packed/paged x pages 1/16/256 x head_dim 64/80/96/128/256, softcap, ALiBi
# [H] and [B, H], a 4096 window over 32k), compute-sanitizer memcheck on a quick run of the
# feature tests, then times head_dim 64..256 prefill and a 4096 window over 32k keys against
# a 4096-key context (bench/gpu_prefill_features_bench.cu). About 5 minutes. Logs to $OUT.
#   run: bash scripts/gpu_prefill_features.sh   (carry .deps; run scripts/device_deps.sh here first)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_features_bench
T=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "prefill GPU suite, full (features first)"
timeout 240 "$T" --gtest_filter='PrefillGpuFeatures.*' >"$OUT/prefill_features.log" 2>&1
echo "features: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/prefill_features.log" | tr '\n' ' ')"
grep -E "^\[ +(OK|FAILED) +\]|Failure|Which is|case [0-9]+ seed|rel|Error" "$OUT/prefill_features.log" | head -40
timeout 200 "$T" --gtest_filter='-PrefillGpuFeatures.*' >"$OUT/prefill_plain.log" 2>&1
echo "plain: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/prefill_plain.log" | tr '\n' ' ')"
grep -E "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$OUT/prefill_plain.log" | head -20

step "memcheck: feature tests (quick)"
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$T" --gtest_filter='PrefillGpuFeatures.*:-*LongWindow32k*' >"$OUT/memcheck_features.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_features.log" | tail -n 1)"
grep -E "^\[  (PASSED|FAILED)|Invalid|out of bounds" "$OUT/memcheck_features.log" | head -10

step "timing"
timeout 90 build-gpu/bench/gpu_prefill_features_bench --reps 30 >"$OUT/prefill_features_bench.log" 2>&1
echo "bench rc=$?"
grep -v '^{' "$OUT/prefill_features_bench.log"
grep '^{' "$OUT/prefill_features_bench.log" >"$OUT/prefill_features_bench.jsonl"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
