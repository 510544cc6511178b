#!/usr/bin/env bash
# What session 7 wrote without running it on a GPU, checked in one call (session 8's first;
# all passed except the fp8 engine test, since replaced: docs/perf/NOTES.md "Session 8"): the decode kernels after their move into src/kernels/cuda/decode/ (decode, store_kv
# and prefill GPU suites), racecheck of the Hopper prefill's experimental gather after its fix,
# the engine's experimental fp8 path (engine_model_gpu_test *Fp8*), the CUDA per-phase timing
# (engine_phase_timing_gpu_test), and whether `kvattn serve` builds with the carried
# cpp-httplib. Logs go to $OUT (or ./out).
#   run: bash scripts/gpu_verify_pending.sh   (carry .deps; run scripts/device_deps.sh here first)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it

step build
kvattn_gpu_build OFF kernels_decode_gpu_test kernels_store_kv_gpu_test kernels_prefill_gpu_test \
  engine_model_gpu_test engine_phase_timing_gpu_test kvattn_cli
grep -q "cpp-httplib not found" "$OUT/build.log" && echo "kvattn serve: cpp-httplib NOT found"
[ -x build-gpu/kvattn ] && build-gpu/kvattn serve --help >/dev/null 2>&1 && echo "kvattn serve: built"

step "kernel GPU suites (decode after the move, store_kv, prefill)"
run_test decode 300 build-gpu/tests/kernels/kernels_decode_gpu_test
run_test store_kv 300 build-gpu/tests/kernels/kernels_store_kv_gpu_test
run_test prefill 300 build-gpu/tests/kernels/kernels_prefill_gpu_test
step "racecheck: Hopper prefill gather (quick)"
KVATTN_PREFILL_SM90_PAGED_GATHER=1 KVATTN_GPU_TEST_QUICK=1 timeout 300 compute-sanitizer \
  --tool racecheck --error-exitcode 9 build-gpu/tests/kernels/kernels_prefill_gpu_test \
  --gtest_filter='*TileEdges*:*EdgeCases*' >"$OUT/racecheck_gather.log" 2>&1
echo "racecheck (gather) rc=$? $(tail -n 1 "$OUT/racecheck_gather.log")"
step "engine: fp8 cache (experimental), phase timing"
run_test engine_fp8 300 build-gpu/tests/engine/engine_model_gpu_test --gtest_filter='*Fp8*'
run_test phase_timing 300 build-gpu/tests/engine/engine_phase_timing_gpu_test
