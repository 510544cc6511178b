#!/usr/bin/env bash
# Session 26, call 4: the softmax's row max between the wait for S and the wait for the
# previous P V GEMM (Tile::kMaxBeforeWait, FlashAttention-3's order; call 3's ncu source view
# put 22.9% of kvattn's warp samples on the wgmma waits against FA3's 13.8%). Build D has it
# on at head_dim 128; the bench's `maxwait` row flips it (off at 128, on at 64 and 256), so
# one process compares both ways. The d128 feature (kMods) shapes: build C (call 2's, off)
# against build D, alternating. Then the whole prefill suite, the sections test and both
# sanitizers on build D. err_vs_def must read 0 on every maxwait row (the same arithmetic).
#   run: bash scripts/sessions/gpu_session26_maxwait.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s26c (call 2's), build-carry-s26d (kvattn, gpu_prefill_bench,
#          kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s26d
BC=/tmp/binC
carried_bins build-carry-s26c "$BC"
trap pack_out EXIT
for round in 1 2; do
  room 300 "round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 30 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | maxwait "
  timeout 100 "$B/gpu_prefill_bench" --d256 --reps 30 >"$OUT/d256_r$round.log" 2>&1
  echo "d256 r$round rc=$?"
  grep -v '^{' "$OUT/d256_r$round.log" | grep -E " default | maxwait "
done
for round in 1 2; do
  for build in C D; do
    room 380 "features $build r$round" || break 2
    bin="$B/gpu_prefill_bench"; [ "$build" = C ] && bin="$BC/gpu_prefill_bench"
    timeout 100 "$bin" --features --only 32/8 --reps 20 >"$OUT/features_${build}_r$round.log" 2>&1
    echo "features $build r$round rc=$?"
    grep -v '^{' "$OUT/features_${build}_r$round.log" | grep -E " default "
  done
done
T="$B/kernels_prefill_gpu_test"
room 430 "suite" && {
  run_logged sections "$B/kernels_prefill_sm90_sections_test"
  run_logged prefill_suite_full "$T"
}
room 500 "sanitizers" && both_sanitizers tiling "$T" \
  'PrefillGpu.TileEdges:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.DynamicTileSchedule:PrefillGpuFeatures.TileHandover'
echo "end ${SECONDS}s"
