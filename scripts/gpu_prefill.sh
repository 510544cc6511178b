#!/usr/bin/env bash
# A prefill iteration on the GPU machine (one call): build the prefill GPU test and benchmark,
# show what the Hopper kernel compiled to (registers, HGMMA/TMA instructions, local memory),
# run the prefill GPU tests on the default path (Hopper where eligible) and on the sm_80 path,
# compute-sanitizer memcheck and racecheck on the quick lists, then the benchmark (sm_80 and
# the default in the same run, flushed and graph timing).
#   run: bash scripts/gpu_prefill.sh   (carry .deps); logs go to $OUT (or ./out)
#   env: SANITIZE=0 skips the sanitizers; BENCH_ARGS passes arguments to gpu_prefill_bench.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"

step build
kvattn_gpu_build ON kernels_prefill_gpu_test gpu_prefill_bench

step "sass (hd128 bf16)"
obj=$(find build-gpu -name 'prefill_sm90_inst_hd128_bf16.cu.o' | head -1)
cuobjdump --dump-resource-usage "$obj" 2>&1 | grep -E "Function|REG|STACK|LOCAL" | head -16
cuobjdump --dump-sass "$obj" >"$OUT/sass_hd128_bf16.txt" 2>&1
for op in HGMMA UTMALDG SYNCS USETMAXREG LDL STL BAR; do
  echo "$op: $(grep -c "$op" "$OUT/sass_hd128_bf16.txt")"
done

step "prefill gpu tests (default path)"
timeout 420 build-gpu/tests/kernels/kernels_prefill_gpu_test >"$OUT/test_default.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_default.log" | tr '\n' ' ')"
grep -E "Failure|FAILED|Expected|Which is|rel|case " "$OUT/test_default.log" | head -30

step "prefill gpu tests (sm_80 path, quick)"
KVATTN_PREFILL_SM90=0 KVATTN_GPU_TEST_QUICK=1 timeout 200 \
  build-gpu/tests/kernels/kernels_prefill_gpu_test >"$OUT/test_sm80.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_sm80.log" | tr '\n' ' ')"

step "prefill gpu tests (Hopper, one CTA per tile, quick)"
KVATTN_PREFILL_SM90_PERSISTENT=0 KVATTN_GPU_TEST_QUICK=1 timeout 200 \
  build-gpu/tests/kernels/kernels_prefill_gpu_test >"$OUT/test_grid.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_grid.log" | tr '\n' ' ')"

step "prefill gpu tests (Hopper, experimental cp.async page gather)"
KVATTN_PREFILL_SM90_PAGED_GATHER=1 timeout 300 \
  build-gpu/tests/kernels/kernels_prefill_gpu_test >"$OUT/test_gather.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_gather.log" | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" "$OUT/test_gather.log" | head -10

if [ "${SANITIZE:-1}" != 0 ]; then
  for tool in memcheck racecheck; do
    step "$tool (quick)"
    KVATTN_GPU_TEST_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
      build-gpu/tests/kernels/kernels_prefill_gpu_test --gtest_filter='*TileEdges*:*EdgeCases*:*Bad*' \
      >"$OUT/${tool}.log" 2>&1
    echo "$tool rc=$? $(tail -n 1 "$OUT/${tool}.log")"
    KVATTN_PREFILL_SM90_PAGED_GATHER=1 KVATTN_GPU_TEST_QUICK=1 timeout 300 compute-sanitizer \
      --tool $tool --error-exitcode 9 build-gpu/tests/kernels/kernels_prefill_gpu_test \
      --gtest_filter='*TileEdges*:*EdgeCases*:*Bad*' >"$OUT/${tool}_gather.log" 2>&1
    echo "$tool (gather) rc=$? $(tail -n 1 "$OUT/${tool}_gather.log")"
  done
fi

step bench
timeout 300 build-gpu/bench/gpu_prefill_bench ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
sed -n '/^bf16 GEMM ceiling/,$p' "$OUT/bench.log"

if [ "${NCU:-0}" != 0 ]; then
  step "ncu (first shape, default kernel)"
  timeout 240 ncu --clock-control none --kernel-name regex:prefill_sm90 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy \
    build-gpu/bench/gpu_prefill_bench --quick --reps 3 >"$OUT/ncu.log" 2>&1
  echo "ncu rc=$?"
  grep -vE '^\{|^==PROF==' "$OUT/ncu.log" | grep -E "Throughput|Pipe|Stall|stall|Issue|Warp Cycles|Active|Eligible|Executed Ipc|Duration|Registers|Shared Memory|Occupancy|Busy" | head -60
fi
