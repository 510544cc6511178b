#!/usr/bin/env bash
# Session 25, call 5: O's rescale before the GEMM turn as the head_dim 128 default
# (Tile::kRescaleBeforeTurn). The whole prefill suite (full), racecheck and memcheck on the
# Hopper tiling tests, the default shapes' bench with the `turnflip` row (the other order:
# in the turn at head_dim 128, before it at 64 and 256) and the feature shapes, then the
# engine's single stream and time to first token.
#   run: bash scripts/sessions/gpu_session25_final.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s25c (kvattn, kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test,
#          gpu_prefill_bench; debs/)
# (The bench's `turnflip` row was removed after call 7, its question settled.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s25c}"
random_qwen3_06b
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged sections "$B/kernels_prefill_sm90_sections_test"
run_logged prefill_suite_full "$T"
both_sanitizers tiling "$T" 'PrefillGpu.TileEdges:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.DynamicTileSchedule:PrefillGpuFeatures.TileHandover'
for round in 1 2; do
  room 330 "bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 30 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | turnflip " | head -n 40
done
room 400 "d256" && {
  timeout 100 "$B/gpu_prefill_bench" --d256 --reps 30 >"$OUT/d256.log" 2>&1
  echo "d256 rc=$?"
  grep -v '^{' "$OUT/d256.log" | grep -E " default | turnflip " | head -n 10
}
room 450 "features" && {
  timeout 100 "$B/gpu_prefill_bench" --features --reps 20 >"$OUT/features.log" 2>&1
  echo "features rc=$?"
  grep -v '^{' "$OUT/features.log" | grep -E " default " | head -n 20
}
room 500 "engine" && {
  single_stream ss1 kvattn 128
  single_stream ss2 kvattn 128
}
echo "end ${SECONDS}s"
