#!/usr/bin/env bash
# Session 20, call 2. Call 1 (gpu_session20_first.sh) ran its tests (all passed, the CUDA fp8
# calibration included) and the decode bench, but its summary and single-stream logs did not
# come back (over the device's 8-file limit). This call repeats what was lost, the single
# stream (RoPE early slot load vs session 19's binary) and memcheck, then runs the prefill
# call prepared in session 19 (lean d64 look-ahead), and packs every log into one file.
#   run: bash scripts/sessions/gpu_session20_second.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20a build-carry-s20b
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20a
carried_unpack build-carry-s20b
random_qwen3_06b
trap pack_out EXIT
for round in 1 2 3; do single_stream "s19_r$round" kvattn_s19; single_stream "new_r$round" kvattn; done
t() {  # $1: label, then the command
  local name=$1; shift
  timeout 200 "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E "PASSED|FAILED|ERROR SUMMARY" "$OUT/$name.log" | head -n 4 | tr '\n' ' ')"
}
t memcheck_rope compute-sanitizer --tool memcheck "$B/engine_fused_rope_kv_gpu_test"
t memcheck_calibration compute-sanitizer --tool memcheck "$B/engine_kv_calibration_gpu_test"
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m8 -E "Failure|illegal|Which is|error" "$OUT/$1.log"; }
timeout 150 "$B/prefill_test_lean" >"$OUT/prefill_full.log" 2>&1; verdict prefill_full $?
for tool in racecheck memcheck; do  # session 18's quick tile-edge filter
  room 330 "$tool" || continue
  KVATTN_GPU_TEST_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/prefill_test_lean" --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases' \
    >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool.log" | tail -n 1)"
done
for round in 1 2; do
  for b in prefill_bench_lean prefill_bench; do
    room 530 "$b round $round" || break 2
    timeout $((585 - SECONDS)) "$B/$b" --reps 10 >"$OUT/${b}_r$round.log" 2>&1
    echo "$b r$round rc=$?"; grep -v '^{' "$OUT/${b}_r$round.log" | grep -E "default|ceiling" | grep -E "d64|ceiling"
  done
done
echo "end ${SECONDS}s"
