#!/usr/bin/env bash
# (Tile::kSoftmaxBeforeWait lost and was removed after it.)
# Session 23, call 4: the Hopper prefill consumers with a basic-block boundary between a key
# tile's softmax and the wait for the previous tile's P V GEMM (Tile::kSoftmaxBeforeWait, on),
# so that ptxas keeps the softmax before that wait: the whole prefill suite, racecheck and
# memcheck on the handover tests, the default shapes' bench (default / wait_hoisted rows) two
# rounds, the feature shapes once (against call 1's default rows), and the engine's TTFT.
#   run: bash scripts/sessions/gpu_session23_fourth.sh > $OUT/summary.txt 2>&1; tail -n 70 $OUT/summary.txt
#   carry: build-carry-s23d (kvattn, kernels_prefill_gpu_test, gpu_prefill_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s23d
random_qwen3_06b
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
both_sanitizers handover "$T" \
  'PrefillGpuFeatures.TileHandover:PrefillGpu.TileHandoverOnAndOff:PrefillGpu.TileEdges'
for round in 1 2; do
  room 330 "bench round $round" || break
  timeout 120 "$B/gpu_prefill_bench" --reps 10 >"$OUT/bench_r$round.log" 2>&1
  echo "bench r$round rc=$?"
  grep -v '^{' "$OUT/bench_r$round.log" | grep -E "ceiling| default | wait_hoisted " | head -n 40
done
room 420 "features" && {
  timeout 100 "$B/gpu_prefill_bench" --features --reps 10 >"$OUT/features.log" 2>&1
  echo "features rc=$?"
  grep -v '^{' "$OUT/features.log" | grep -E "ceiling| default " | head -n 20
}
room 480 "engine" && single_stream ttft kvattn 128
echo "end ${SECONDS}s"
