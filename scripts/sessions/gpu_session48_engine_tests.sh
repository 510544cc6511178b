#!/usr/bin/env bash
# Prepared in session 47 for the next session: the engine GPU tests that run models, on
# session 47's split of cuda_model.cpp (cuda_model_impl.h, cuda_model_step.cpp: no code
# changed, compiled and linked, never run on a GPU) and its fp8 decode kernels. Any card.
# Built here (sm_90a); quick mode; then memcheck on the model test's fp8 cases.
#   run: LIMIT=500 bash scripts/sessions/gpu_session48_engine_tests.sh 2>&1 | tee $OUT/summary.txt
#   carry: .deps/private
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_env.sh      # .deps' packages, OUT, step, kvattn_gpu_build
source scripts/device_carried.sh  # run_logged, room, pack_out
trap pack_out EXIT
LIMIT=${LIMIT:-500}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
tests="model fused_gemv_engine fused_kernels cuda_serving pdl token_layers model_families cascade_decode kv_calibration"
step build
targets=""
for t in $tests; do targets="$targets engine_${t}_gpu_test"; done
# shellcheck disable=SC2086
kvattn_gpu_build OFF $targets
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
echo "built at ${SECONDS}s"
step "engine GPU tests (quick)"
for t in $tests; do
  room $((LIMIT - 60)) "$t" || break
  run_logged "$t" timeout 150 env KVATTN_GPU_TEST_QUICK=1 "build-gpu/tests/engine/engine_${t}_gpu_test"
done
room $((LIMIT - 40)) "memcheck" && KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_model_fp8 \
  compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/engine/engine_model_gpu_test \
  --gtest_filter='*Fp8*'
echo "end ${SECONDS}s"
