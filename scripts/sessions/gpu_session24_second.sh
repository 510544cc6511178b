#!/usr/bin/env bash
# Session 24, call 2: the dynamic tile schedule's second form (call 1's, plus at least
# prefill_sm90_dynamic_min_rounds = 8 rounds of the grid, and the window / softcap / ALiBi
# kernels taking the handover for it). Its test in full mode and under both
# sanitizers, the whole prefill suite, the default shapes' bench (default / static / dynamic2
# rows) once, the feature shapes once, and the engine's time to first token with the
# schedule off and on.
#   run: bash scripts/sessions/gpu_session24_second.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s24b (kvattn, kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test,
#          gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s24b}"
random_qwen3_06b
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged sections "$B/kernels_prefill_sm90_sections_test"
run_logged dynamic_full "$T" --gtest_filter='PrefillGpu.DynamicTileSchedule'
both_sanitizers dynamic "$T" 'PrefillGpu.DynamicTileSchedule:PrefillGpuFeatures.TileHandover'
run_logged prefill_suite_full "$T"
for round in 1; do
  room 360 "bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 10 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | static | dynamic2 " | head -n 60
done
room 450 "features" && {
  timeout 120 "$B/gpu_prefill_bench" --features --reps 10 >"$OUT/features.log" 2>&1
  echo "features rc=$?"
  grep -v '^{' "$OUT/features.log" | grep -E "ceiling| default | static | dynamic2 " | head -n 40
}
room 520 "engine" && {
  for r in 1 2; do
    KVATTN_PREFILL_SM90_DYNAMIC=0 single_stream ttft_static$r kvattn 128
    single_stream ttft_dynamic$r kvattn 128
  done
}
echo "end ${SECONDS}s"
