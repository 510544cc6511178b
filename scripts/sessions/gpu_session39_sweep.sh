#!/usr/bin/env bash
# Session 39, call 11: the CTA sweep's copy loop without a division a copy (decode_cta_sweep.cuh;
# call 10's source view: a signed division by the run-time chunks-a-key was ~9% of the fp8 d64
# kernel's instructions, and that kernel is issue-bound). The decode suite (quick), racecheck and
# memcheck of the CTA sweep's test, then fp8 d64 (9/3 and 8/8) against call 9's build
# (old_gpu_decode_bench), one process each, alternating.
#   run: bash scripts/sessions/gpu_session39_sweep.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39g (gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39g}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 120 "sanitizers" && both_sanitizers sweep "$B/kernels_decode_gpu_test" 'DecodeGpu.Fp8CtaSweep'
for round in 1 2 3; do
  for side in old new; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 240 "bench" && BENCH_TIMEOUT=100 bench_rows "fp8_${side}$round" $bin "^decode default " \
      --only d64fp8 --variants default
  done
done
echo "end ${SECONDS}s"
