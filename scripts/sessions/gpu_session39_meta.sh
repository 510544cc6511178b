#!/usr/bin/env bash
# Session 39, call 8: the merge kernel's meta from the lengths before its PDL wait (one
# workspace round trip fewer after the split kernel's completion): the decode suite (quick),
# racecheck and memcheck of stream-mode cases, then the d64 shapes, 64x4096 d128 and the
# engine's batches against the build before it (old_gpu_decode_bench, c5a77c5's kernels), one
# process each, alternating.
#   run: bash scripts/sessions/gpu_session39_meta.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39e (gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39e}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 150 "sanitizers" && both_sanitizers meta "$B/kernels_decode_gpu_test" \
  'DecodeGpu.StreamWaves:DecodeGpu.ModerateBatchesAcrossKernelChoices'
rows="^decode default "
for round in 1 2; do
  for side in old new; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 330 "bench" && bench_rows "d64s_${side}$round" $bin "$rows" --only d64s --variants default
    room 350 "bench" && bench_rows "d128_${side}$round" $bin "$rows" --only d128 --variants default
    room 370 "bench" && bench_rows "engine_${side}$round" $bin "$rows" --only engine --variants default
  done
done
echo "end ${SECONDS}s"
