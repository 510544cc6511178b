#!/usr/bin/env bash
# Session 38, call 5: the merge kernel in one pass (each batch's LSEs and partials loaded together,
# a running max: one L2 round trip fewer after the split kernel), against call 4's build
# (old_gpu_decode_bench) in one process each, alternating: the decode suite, racecheck and
# memcheck of stream-mode cases (several pieces a sequence) on the new build first, then the
# d64 shapes (default and the split kernel alone), 64x4096 d128 and the engine's batches.
#   run: bash scripts/sessions/gpu_session38_merge.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38d (gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38d}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
room 240 "sanitizers" && both_sanitizers merge "$B/kernels_decode_gpu_test" \
  'DecodeGpu.StreamWaves:DecodeGpu.ModerateBatchesAcrossKernelChoices'
bench() {  # LABEL BIN ARGS...
  local label=$1 bin=$2; shift 2
  timeout 150 "$B/$bin" "$@" > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?: $(grep -o '"op": "[^"]*", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_$label.txt" |
    sed 's/"op": //; s/"shape": //; s/"us": //' | tr '\n' ' ')"
}
for round in 1 2; do
  for side in old new; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 420 "bench" && bench "d64s_${side}$round" $bin --only d64s --variants 'diag nomerge'
    room 440 "bench" && bench "d128_${side}$round" $bin --only d128 --variants 'diag nomerge'
    room 460 "bench" && bench "engine_${side}$round" $bin --only engine --variants default
  done
done
echo "end ${SECONDS}s"
