#!/usr/bin/env bash
# Next session, call 1 (issue 16): session 15 made the hardware e4m3 conversion the fp8 decode's
# default after its own test and bench only; this runs the whole decode suite on it (and the
# integer form's test), memcheck, the written-but-unrun Q-in-f16 path (KVATTN_DECODE_FP8_Q_F16:
# K by the hardware conversion too, for bf16 queries) under its test, then the fp8 rows with
# "int" and "qf16" beside the default. Prediction (docs/notes/decode-next.md): qf16 +5-8% at
# d128 (64x4096 ~150 us, ~1.7x bf16).
# Call 2: `TESTS=0 bash scripts/gpu_decode_peers.sh` (carry .deps .peers) for the same-run table.
#   run: bash scripts/sessions/gpu_session16_first.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: .deps (and build-carry, when the two binaries were built here:
#          cp build-gpu/tests/kernels/kernels_decode_gpu_test build-gpu/bench/gpu_decode_bench
#          build-carry/ && strip build-carry/*)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
if [ -x build-carry/kernels_decode_gpu_test ] && [ -x build-carry/gpu_decode_bench ]; then
  T=build-carry/kernels_decode_gpu_test B=build-carry/gpu_decode_bench
else
  step build
  kvattn_gpu_build ON kernels_decode_gpu_test gpu_decode_bench
  T=build-gpu/tests/kernels/kernels_decode_gpu_test B=build-gpu/bench/gpu_decode_bench
fi
step "tests: Q in f16 first, then the whole decode suite (hardware conversion by default)"
run_test decode_qf16 120 "$T" --gtest_filter='DecodeGpu.Fp8QueriesInBf16:DecodeGpu.Fp8IntegerConversion'
KVATTN_GPU_TEST_QUICK=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='DecodeGpu.Fp8QueriesInBf16:DecodeGpu.Fp8CodesReadExactly*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -n 1)"
run_test decode_all 300 "$T"
step "fp8 decode rows (us): default (hw V), int, qf16"
timeout 120 "$B" --only fp8 --reps 20 >"$OUT/fp8_bench.log" 2>&1
echo "rc=$?"
grep -v '^{' "$OUT/fp8_bench.log" | grep -E "decode (default|int|qf16|qf16 noswap) "
if [ -x build-carry/read_rate ]; then  # bench/micro/read_rate.cu, built here
  step "read ceiling by load kind (bench/micro/read_rate.cu)"
  timeout 60 build-carry/read_rate 2>&1 | tee "$OUT/read_rate.log"
fi
step "the small kernel for every batch (decode_small_chunks 1, 2): tests, then bf16 rows"
run_test small_forced 240 "$T" --gtest_filter='DecodeGpuVariants.Sweep:DecodeGpuFeatures.Variants'
timeout 240 "$B" --only decode --quick --reps 10 >"$OUT/decode_bench.log" 2>&1
echo "rc=$?"
grep -v '^{' "$OUT/decode_bench.log" | grep -E "decode (default|small c1|small c1 w4|small c2|small c2 w4) " | grep -v fp8
step "short contexts: chunks unused below N tiles a warp (decode_small_min_tiles), us"
grep -v '^{' "$OUT/decode_bench.log" | grep -E "decode (default|small mt1|small mt2|small mt4) " | grep -E "1x(130|600|2048|8192) "
