#!/usr/bin/env bash
# Session 26, call 5: the session's final prefill (build E: the row max before the P V wait at
# head_dim 128 in the plain kernels only, the uniform warpgroup index at head_dim 256). The
# whole prefill suite and the sections test, the default shapes' bench with the `maxwait` row,
# the engine's single stream and time to first token (4096) with build C (before this
# session's d128 change) and build E (after), alternating; both sanitizers last if time is left.
#   run: bash scripts/sessions/gpu_session26_final.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s26c (call 2's), build-carry-s26e (kvattn, gpu_prefill_bench,
#          kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s26e
carried_bins build-carry-s26c /tmp/binC
ln -sf /tmp/binC/kvattn "$B/kvattn_before"
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged sections "$B/kernels_prefill_sm90_sections_test"
run_logged prefill_suite_full "$T"
timeout 150 "$B/gpu_prefill_bench" --reps 30 >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -v '^{' "$OUT/bench.log" | grep -E "ceiling| default | maxwait "
random_qwen3_06b
for round in 1 2; do
  room 420 "engine r$round" || break
  single_stream "before_r$round" kvattn_before 128
  single_stream "after_r$round" kvattn 128
done
room 470 "sanitizers" && both_sanitizers tiling "$T" \
  'PrefillGpu.TileEdges:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.DynamicTileSchedule'
echo "end ${SECONDS}s"
