#!/usr/bin/env bash
# Session 22, call 6: the tile handover on by default (CudaTuning::prefill_sm90_handover = 2:
# where a tile's key loop is short, and each CTA's tiles fit the slot ring): the whole prefill
# suite, racecheck and memcheck (the handover test, tile edges with the default), the C++ bench
# (default / nohandover / handover), and the engine's time to first token for a 4096-token
# prompt and single stream with the handover off / on, alternating.
# Build: cmake --build build-gpu --target kernels_prefill_gpu_test gpu_prefill_bench kvattn_cli;
#   pack the three stripped into build-carry-s22f/bins.tar.xz with debs/.
#   run: bash scripts/sessions/gpu_session22_final.sh > $OUT/summary.txt 2>&1; tail -n 50 $OUT/summary.txt
#   carry: build-carry-s22f
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s22f
trap pack_out EXIT
T="$B/kernels_prefill_gpu_test"
run_logged prefill_suite_full "$T"
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 run_logged "${tool}_prefill" compute-sanitizer --tool $tool \
    --error-exitcode 9 "$T" \
    --gtest_filter='PrefillGpu.TileHandoverOnAndOff:PrefillGpu.TileEdges:PrefillGpu.EdgeCases'
done
room 330 "bench" && {
  timeout 150 "$B/gpu_prefill_bench" --reps 10 >"$OUT/prefill_bench.log" 2>&1
  echo "prefill bench rc=$?"
  grep -v '^{' "$OUT/prefill_bench.log" | grep -E "ceiling| default | nohandover | handover " | head -n 30
}
random_qwen3_06b
round=0
for h in 0 2 0 2; do
  round=$((round + 1))
  room 540 "engine h$h" || break
  KVATTN_PREFILL_SM90_HANDOVER=$h single_stream "r${round}_h$h" kvattn
done
echo "end ${SECONDS}s"
