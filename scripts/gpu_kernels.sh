#!/usr/bin/env bash
# A kernel iteration on the GPU machine (one call): build only the CUDA kernel tests and
# benchmarks, run the kernel GPU tests (full lists), compute-sanitizer memcheck on the quick
# lists, the decode phase probe and the store_kv/decode benchmark. No peers (scripts/gpu_run.sh
# makes the same-run table with them).
#   run: bash scripts/gpu_kernels.sh [bench args...]   (carry .deps); logs go to $OUT (or ./out)
#   env: TESTS="decode store_kv" (the kernel tests to run; TESTS= runs none), PROBE=0 skips
#   the decode probe.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
step() { echo; echo "== $* == ($(date +%T))"; }

step build
targets=(kernels_decode_gpu_test kernels_store_kv_gpu_test kernels_prefill_gpu_test gpu_decode_bench
         gpu_decode_probe)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA_ARCHS=90a \
  -DKVATTN_BENCH=ON >"$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" >>"$OUT/build.log" 2>&1
rc=$?
tail -n 5 "$OUT/build.log"
[ $rc -eq 0 ] || { grep -B2 -A8 "error" "$OUT/build.log" | head -60; echo "BUILD FAILED"; exit 1; }

step "kernel gpu tests"
TESTS=${TESTS-decode store_kv}
for t in $TESTS; do
  timeout 300 build-gpu/tests/kernels/kernels_${t}_gpu_test >"$OUT/test_$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_$t.log" | tr '\n' ' ')"
  grep -E "Failure|FAILED|Expected|Which is|rel_l2|vs " "$OUT/test_$t.log" | head -20
done

step memcheck
for t in $TESTS; do
  KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu/tests/kernels/kernels_${t}_gpu_test >"$OUT/memcheck_$t.log" 2>&1
  echo "$t: memcheck rc=$? $(tail -n 1 "$OUT/memcheck_$t.log")"
done

if [ "${PROBE:-1}" != 0 ]; then
  step probe
  timeout 120 build-gpu/bench/gpu_decode_probe >"$OUT/probe.log" 2>&1; echo "probe rc=$?"
  grep -v '^{' "$OUT/probe.log" | head -120
  grep '^{' "$OUT/probe.log" | head -80
fi

step bench
timeout 240 build-gpu/bench/gpu_decode_bench "$@" >"$OUT/bench.log" 2>&1; echo "bench rc=$?"
sed -n '/^SUMMARY/,$p' "$OUT/bench.log"
