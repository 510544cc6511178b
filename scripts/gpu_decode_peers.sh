#!/usr/bin/env bash
# Decode on the GPU machine in one call: the store_kv, decode and prefill GPU tests (bf16 and
# fp8 caches) and memcheck on the fp8 ones, then kvattn against cuDNN and FlashInfer in one Python process
# (bench/decode_peers_same_run.py: graph replay and flushed, bf16 and fp8 caches, read and copy
# ceilings of the same run). Logs and JSON go to $OUT (or ./out).
#   here, once: the FlashInfer wheels into .peers/whl (see scripts/gpu_prefill_peers.sh)
#   run: bash scripts/gpu_decode_peers.sh   (carry .deps .peers)
#   env: TESTS=0 skips the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

if [ "${TESTS:-1}" != 0 ]; then
  step build
  kvattn_gpu_build OFF kernels_store_kv_gpu_test kernels_decode_gpu_test kernels_prefill_gpu_test
  for t in store_kv decode prefill; do
    step "$t gpu test"
    timeout 240 build-gpu/tests/kernels/kernels_${t}_gpu_test >"$OUT/test_$t.log" 2>&1
    echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_$t.log" | tr '\n' ' ')"
    grep -E "Failure|Which is|trace:|case [0-9]+ seed|read as|LSE " "$OUT/test_$t.log" | head -12
    grep -E "fp8" "$OUT/test_$t.log" | grep -E "rel_l2" | head -8
  done
  step "memcheck (fp8 tests, quick)"
  for t in store_kv decode prefill; do
    KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
      build-gpu/tests/kernels/kernels_${t}_gpu_test --gtest_filter='*Fp8*' >"$OUT/memcheck_$t.log" 2>&1
    echo "$t memcheck rc=$? $(tail -n 1 "$OUT/memcheck_$t.log")"
  done
fi

kvattn_run_peers bench/decode_peers_same_run.py decode_peers.log 14
