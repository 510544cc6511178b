#!/usr/bin/env bash
# Issue 18 on the Hopper prefill kernel, in one GPU call: sliding window, softcap and ALiBi in
# the sm_90a kernel (kMods, head_dim 64/128; head_dim 256 where built) against the sm_80 ext
# kernel. Builds the prefill GPU suite and gpu_prefill_bench; shows the kMods kernels' resource
# usage; runs the feature tests on the default path (the Hopper kernel wherever eligible; the
# BothPaths* tests force each kernel in turn, float64 reference), the feature tests again with
# KVATTN_PREFILL_SM90=0 (quick), a quick check that the plain Hopper kernels still pass,
# compute-sanitizer memcheck on a quick feature list, then times the feature shapes: the
# Hopper kMods kernel ("default") beside the plain Hopper kernel on the same shape without the
# features ("plain", its own FLOPs) and the ext kernel ("sm80"). Under 6 minutes on a 16-core
# H200 machine (most of it the build). Logs to $OUT.
#   run: bash scripts/gpu_prefill_sm90_features.sh   (carry .deps; run scripts/device_deps.sh here first)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench
T=build-gpu/tests/kernels/kernels_prefill_gpu_test

step "resource usage of the kMods kernels"
for obj in $(find build-gpu -name 'prefill_sm90_mods_inst_hd*_bf16.cu.o' | sort); do
  echo "$(basename "$obj")"
  cuobjdump --dump-resource-usage "$obj" 2>&1 | grep -E "REG|STACK|LOCAL" | head -4
done

step "feature tests, default path (full; BothPaths* run each kernel)"
timeout 180 "$T" --gtest_filter='PrefillGpuFeatures.*' >"$OUT/sm90_features.log" 2>&1
echo "features: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/sm90_features.log" | tr '\n' ' ')"
grep -E "^\[ +(OK|FAILED) +\]|Failure|Which is|case [0-9]+ seed" "$OUT/sm90_features.log" | head -40

step "feature tests, KVATTN_PREFILL_SM90=0 (quick)"
KVATTN_PREFILL_SM90=0 KVATTN_GPU_TEST_QUICK=1 timeout 45 "$T" \
  --gtest_filter='PrefillGpuFeatures.*:-*LongWindow32k*' >"$OUT/sm80_features.log" 2>&1
echo "sm80 features: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/sm80_features.log" | tr '\n' ' ')"
grep -E "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$OUT/sm80_features.log" | head -20

step "plain tests (quick: the plain Hopper kernels are unchanged)"
KVATTN_GPU_TEST_QUICK=1 timeout 45 "$T" \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.Bad*:PrefillGpu.RandomSweep' \
  >"$OUT/plain_quick.log" 2>&1
echo "plain: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/plain_quick.log" | tr '\n' ' ')"
grep -E "^\[ +FAILED +\]|Failure|Which is|case [0-9]+ seed" "$OUT/plain_quick.log" | head -20

step "memcheck: feature tests (quick list)"
KVATTN_GPU_TEST_QUICK=1 timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='PrefillGpuFeatures.BothPathsTileEdges:PrefillGpuFeatures.WindowSkipsTilesBeforeIt:PrefillGpuFeatures.SoftcapAndAlibi' \
  >"$OUT/memcheck_sm90_features.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_sm90_features.log" | tail -n 1)"
grep -E "^\[  (PASSED|FAILED)|Invalid|out of bounds" "$OUT/memcheck_sm90_features.log" | head -10

step "timing: feature shapes (default = Hopper kMods, plain = Hopper without the features, sm80 = ext)"
timeout 60 build-gpu/bench/gpu_prefill_bench --features --reps 20 >"$OUT/sm90_features_bench.log" 2>&1
echo "bench rc=$?"
grep -v '^{' "$OUT/sm90_features_bench.log"
grep '^{' "$OUT/sm90_features_bench.log" >"$OUT/sm90_features_bench.jsonl"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
