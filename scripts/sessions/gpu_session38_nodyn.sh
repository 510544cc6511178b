#!/usr/bin/env bash
# Session 38, call 3: the split kernel without the dynamic split's code (KVATTN_DECODE_DYNAMIC_SPLIT_BUILD
# off: the 16-bit d64 lean tile back from 128 registers with spills to 119 without), against the
# build before it (old_*: this session's first build), in one call: the decode suite on the new
# build, then the decode bench (the d64 and d128 profiler shapes, the engine's ragged batches, the
# decode table's page-16 rows), old and new alternating (the engine A/B did not fit the carry).
#   run: bash scripts/sessions/gpu_session38_nodyn.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38b (gpu_decode_bench, kernels_decode_gpu_test,
#          old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38b}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
bench() {  # LABEL BIN ARGS...
  local label=$1 bin=$2; shift 2
  timeout 150 "$B/$bin" "$@" --variants default > "$OUT/bench_$label.txt" 2>&1
  echo "bench $label rc=$?: $(grep -o '"op": "decode default", "shape": "[^"]*", "us": [0-9.]*' "$OUT/bench_$label.txt" |
    sed 's/"op": "decode default", //' | tr '\n' ' ')"
}
for round in 1 2; do
  for side in old new; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 250 "bench" && bench "d64_${side}$round" $bin --only d64
    room 250 "bench" && bench "d128_${side}$round" $bin --only d128
    room 280 "bench" && bench "engine_${side}$round" $bin --only engine
  done
done
room 330 "bench decode" && bench decode_old old_gpu_decode_bench --only decode --quick
room 380 "bench decode" && bench decode_new gpu_decode_bench --only decode --quick
echo "end ${SECONDS}s"
