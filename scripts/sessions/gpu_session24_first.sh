#!/usr/bin/env bash
# Session 24, call 1: the Hopper prefill's dynamic tile schedule (CudaTuning::prefill_sm90_dynamic,
# default 1: the producer claims tiles from a counter where a launch takes the tile handover;
# hopper/prefill_sm90_schedule.cuh, for_each_claimed_tile). Its test in full mode and under both
# sanitizers, the whole prefill suite, the default shapes' bench (default / static / dynamic2
# rows) two rounds, the feature shapes once, and the engine's time to first token with the
# schedule off and on.
#   run: bash scripts/sessions/gpu_session24_first.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s24a (kvattn, kernels_prefill_gpu_test, kernels_prefill_sm90_sections_test,
#          gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s24a}"
random_qwen3_06b
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged sections "$B/kernels_prefill_sm90_sections_test"
run_logged dynamic_full "$T" --gtest_filter='PrefillGpu.DynamicTileSchedule'
both_sanitizers dynamic "$T" 'PrefillGpu.DynamicTileSchedule:PrefillGpu.TileHandoverOnAndOff'
run_logged prefill_suite_full "$T"
for round in 1 2; do
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
  KVATTN_PREFILL_SM90_DYNAMIC=0 single_stream ttft_static kvattn 128
  single_stream ttft_dynamic kvattn 128
}
echo "end ${SECONDS}s"
