#!/usr/bin/env bash
# Session 15, last call (issue 16): the hardware e4m3 conversion for the fp8 decode
# (KVATTN_DECODE_FP8_HW_CVT), from binaries built here (the device time left did not cover a
# build): its correctness test, memcheck, and the fp8 decode rows with and without it.
# Prediction: 64x4096 d128 fp8 +8-15%, d64 +5-10% (docs/notes/decode-next.md, session 15).
#   here: cmake --build build-gpu --target kernels_decode_gpu_test gpu_decode_bench, then
#         mkdir -p build-carry && cp build-gpu/tests/kernels/kernels_decode_gpu_test
#         build-gpu/bench/gpu_decode_bench build-carry/ && strip build-carry/*
# (Ran with the hardware form off by default; since then it is the default and the test that
# ran as DecodeGpu.Fp8HardwareConversion is DecodeGpu.Fp8IntegerConversion, for the old form.)
#   run:  bash scripts/sessions/gpu_session15_fp8hw.sh > $OUT/summary.txt 2>&1   (carry .deps build-carry)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
T=build-carry/kernels_decode_gpu_test
step "fp8 hardware conversion: tests"
run_test fp8hw 60 "$T" --gtest_filter='DecodeGpu.Fp8HardwareConversion:DecodeGpu.Fp8CodesReadExactly*'
KVATTN_GPU_TEST_QUICK=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='DecodeGpu.Fp8HardwareConversion' >"$OUT/fp8hw_memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/fp8hw_memcheck.log" | tail -n 1)"
step "fp8 decode rows (graph / flushed us): default vs hw"
timeout 100 build-carry/gpu_decode_bench --only fp8 --reps 20 >"$OUT/fp8_bench.log" 2>&1
echo "rc=$?"
grep -v '^{' "$OUT/fp8_bench.log" | grep -E " (default|hw|hw noswap|hw nosmall|swap nosmall|noswap) " | head -60
