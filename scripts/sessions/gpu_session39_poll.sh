#!/usr/bin/env bash
# Session 39, call 1: the polled merge (decode_merge_poll: the split kernel tags the pieces it
# leaves in the workspace, merge_polled_kernel merges each sequence once its tags are there,
# while the split kernel's last CTAs still run). The decode suite (quick) with its new cases,
# racecheck and memcheck of the polled forms, then the polled merge beside the default (merge
# after the split's completion) in one bench process each: the d64 shapes, 64x4096 d128, the
# engine's batches, the quick decode table and the fp8 rows.
#   run: bash scripts/sessions/gpu_session39_poll.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39a (gpu_decode_bench, kernels_decode_gpu_test; debs/),
#          built from commit f753913 (main no longer has the polled merge's rows)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39a}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 200 "sanitizers" && both_sanitizers poll "$B/kernels_decode_gpu_test" \
  'DecodeGpu.PolledMerge*:DecodeGpu.ProgrammaticLaunchAfterAWriter'
bench() {  # LABEL ARGS...
  local label=$1; shift
  timeout 150 "$B/gpu_decode_bench" "$@" > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?"
  grep -E "^decode (default|polled merge|diag nomerge) " "$OUT/bench_$label.txt" | sed 's/  */ /g'
}
for round in 1 2; do
  room 380 "bench" && bench "d64s_$round" --only d64s --variants 'polled merge,diag nomerge'
  room 400 "bench" && bench "d128_$round" --only d128 --variants 'polled merge,diag nomerge'
  room 420 "bench" && bench "engine_$round" --only engine --variants 'polled merge'
done
room 470 "bench" && bench decode_quick --only decode --quick --variants 'polled merge'
room 520 "bench" && bench fp8 --only fp8 --quick --variants 'polled merge'
echo "end ${SECONDS}s"
