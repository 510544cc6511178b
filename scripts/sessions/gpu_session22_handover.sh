#!/usr/bin/env bash
# Session 22, calls 3 and 5: the Hopper prefill's tile handover through the async proxy (the producer
# writes the decoded tile to its SM's global slot and bulk-loads it into shared memory on q_full,
# as Q; no plain shared-memory store for racecheck to flag): the prefill suite (quick), the
# handover test in full, racecheck and memcheck on it and on the tile-edge cases with the
# handover always on, then the C++ bench's default / handover / handover_auto rows, two rounds.
# (call 3: one slot, reused; call 5: a ring of slots, one a tile).
# Build: cmake --build build-gpu --target kernels_prefill_gpu_test gpu_prefill_bench; pack both
#   stripped into $CARRY/bins.tar.xz with debs/ (as session 22's first call).
#   run: CARRY=build-carry-s22e bash scripts/sessions/gpu_session22_handover.sh > $OUT/summary.txt 2>&1; tail -n 50 $OUT/summary.txt
#   carry: build-carry-s22e (call 3: build-carry-s22c)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${CARRY:-build-carry-s22c}"
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
KVATTN_GPU_TEST_QUICK=1 run_logged prefill_suite "$T"
run_logged handover_full "$T" --gtest_filter='PrefillGpu.TileHandoverOnAndOff'
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 run_logged "${tool}_handover" compute-sanitizer --tool $tool \
    --error-exitcode 9 "$T" --gtest_filter='PrefillGpu.TileHandoverOnAndOff'
  KVATTN_PREFILL_SM90_HANDOVER=1 KVATTN_GPU_TEST_QUICK=1 run_logged "${tool}_edges_h1" \
    compute-sanitizer --tool $tool --error-exitcode 9 "$T" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases'
done
for round in 1 2; do
  room 420 "bench round $round" || break
  timeout 150 "$B/gpu_prefill_bench" --reps 10 >"$OUT/prefill_bench_r$round.log" 2>&1
  echo "prefill bench r$round rc=$?"
  grep -v '^{' "$OUT/prefill_bench_r$round.log" | grep -E "ceiling| default | handover" | head -n 30
done
echo "end ${SECONDS}s"
