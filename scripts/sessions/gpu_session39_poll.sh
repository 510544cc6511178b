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
rows="^decode (default|polled merge|diag nomerge) "
for round in 1 2; do
  room 380 "bench" && bench_rows "d64s_$round" gpu_decode_bench "$rows" --only d64s --variants 'polled merge,diag nomerge'
  room 400 "bench" && bench_rows "d128_$round" gpu_decode_bench "$rows" --only d128 --variants 'polled merge,diag nomerge'
  room 420 "bench" && bench_rows "engine_$round" gpu_decode_bench "$rows" --only engine --variants 'polled merge'
done
room 470 "bench" && bench_rows decode_quick gpu_decode_bench "$rows" --only decode --quick --variants 'polled merge'
room 520 "bench" && bench_rows fp8 gpu_decode_bench "$rows" --only fp8 --quick --variants 'polled merge'
echo "end ${SECONDS}s"
