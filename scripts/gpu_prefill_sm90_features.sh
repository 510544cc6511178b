#!/usr/bin/env bash
# Issue 18 on the Hopper prefill kernel, in one GPU call: sliding window, softcap and ALiBi in
# the sm_90a kernel (kMods) and head_dim 256 (plain and kMods, 128 x 64 tiles), against the
# sm_80 ext kernel. Builds the prefill GPU suite and gpu_prefill_bench; shows the new kernels'
# resource usage; runs the feature tests on the default path (the Hopper kernel wherever
# eligible, head_dim 64/128/256), the BothPaths* tests (each case on the Hopper kernel and on
# the ext kernel, float64 reference), a quick check that the plain Hopper kernels still pass,
# compute-sanitizer memcheck on a quick feature list, then
# times the feature shapes (the Hopper kMods kernel "default" beside the plain Hopper kernel on
# the same shape without the features, "plain", its own FLOPs, and the ext kernel, "sm80") and
# the plain head_dim 256 shapes (Hopper "default"/"grid" vs "sm80"). Under 6 minutes on a
# 16-core H200 machine (most of it the build). Logs to $OUT.
#   run: bash scripts/gpu_prefill_sm90_features.sh   (carry .deps; run scripts/device_deps.sh here first)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
T=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "resource usage of the kMods and head_dim 256 kernels"
for obj in $(find build-gpu -name 'prefill_sm90_mods_inst_hd*_bf16.cu.o' -o \
             -name 'prefill_sm90_inst_hd256_bf16.cu.o' | sort); do
  echo "$(basename "$obj")"
  cuobjdump --dump-resource-usage "$obj" 2>&1 | grep -E "REG|STACK|LOCAL" | head -4
done

step "feature tests, default path (full: Hopper kMods / head_dim 256 wherever eligible)"
timeout 150 "$T" --gtest_filter='PrefillGpuFeatures.*:-*BothPaths*' >"$OUT/sm90_features.log" 2>&1
echo "features: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/sm90_features.log" | tr '\n' ' ')"
grep -E "^\[ +(OK|FAILED) +\]|Failure|Which is|case [0-9]+ seed" "$OUT/sm90_features.log" | head -30

step "feature tests on both kernels (BothPaths*: Hopper then sm_80 ext, float64 reference)"
timeout 120 "$T" --gtest_filter='*BothPaths*' >"$OUT/both_paths.log" 2>&1
echo "both paths: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/both_paths.log" | tr '\n' ' ')"
grep -E "^\[ +(OK|FAILED) +\]|Failure|Which is|case [0-9]+ seed" "$OUT/both_paths.log" | head -30

step "plain tests (quick: the plain head_dim 64/128 Hopper kernels are unchanged)"
KVATTN_GPU_TEST_QUICK=1 timeout 40 "$T" \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.Bad*' \
  >"$OUT/plain_quick.log" 2>&1
echo "plain: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/plain_quick.log" | tr '\n' ' ')"
grep -E "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$OUT/plain_quick.log" | head -20

step "memcheck: feature tests (quick list)"
KVATTN_GPU_TEST_QUICK=1 timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='PrefillGpuFeatures.BothPathsTileEdges:PrefillGpuFeatures.WindowSkipsTilesBeforeIt' \
  >"$OUT/memcheck_sm90_features.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_sm90_features.log" | tail -n 1)"
grep -E "^\[  (PASSED|FAILED)|Invalid|out of bounds" "$OUT/memcheck_sm90_features.log" | head -10

step "timing: feature shapes (default = Hopper kMods, plain = Hopper without the features, sm80 = ext)"
timeout 60 build-gpu/bench/gpu_prefill_bench --features --reps 20 >"$OUT/sm90_features_bench.log" 2>&1
echo "bench rc=$?"
grep -v '^{' "$OUT/sm90_features_bench.log"
grep '^{' "$OUT/sm90_features_bench.log" >"$OUT/sm90_features_bench.jsonl"

step "timing: plain head_dim 256 (default = Hopper, grid = one CTA per tile, sm80 = ext)"
timeout 45 build-gpu/bench/gpu_prefill_bench --d256 --reps 20 >"$OUT/sm90_d256_bench.log" 2>&1
echo "bench rc=$?"
grep -v '^{' "$OUT/sm90_d256_bench.log"
grep '^{' "$OUT/sm90_d256_bench.log" >"$OUT/sm90_d256_bench.jsonl"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
