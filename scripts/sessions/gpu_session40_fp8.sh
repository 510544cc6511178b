#!/usr/bin/env bash
# Session 40, call 1: the fp8 d64 kernel's instruction diet (the CTA sweep's per-thread copy
# share computed once a CTA; bf16 queries rewritten in f16 at head_dim 64 too, so K takes the
# hardware conversion) and the merge kernel deriving every row's meta from the lengths (no
# ws_meta): the decode suite (quick), racecheck and memcheck of the CTA sweep's and the stream
# mode's cases, then every fp8 shape beside its bf16 twin (`--only fp8`) against the build
# before it (old_gpu_decode_bench, session 39's final kernels), one process each, alternating.
#   run: bash scripts/sessions/gpu_session40_fp8.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s40a (gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s40a}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 200 "sanitizers" && both_sanitizers sweep "$B/kernels_decode_gpu_test" \
  'DecodeGpu.Fp8CtaSweep:DecodeGpu.StreamWaves'
rows="^decode (default|fp8) "
for round in 1 2; do
  for side in new old; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 480 "bench" && bench_rows "fp8_${side}$round" $bin "$rows" --only fp8 --variants default
  done
done
echo "end ${SECONDS}s"
