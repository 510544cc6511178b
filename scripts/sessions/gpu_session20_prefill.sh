#!/usr/bin/env bash
# Session 20, call 2 (prepared in session 19; binaries built then at 66d8138, carried): the lean
# look-ahead of the head_dim 64 consumers (-DKVATTN_PREFILL_SM90_LEAN_LOOKAHEAD=1; the
# section arithmetic ahead in 3 registers, cu_seqlens prefetched into L1): the whole prefill
# suite and racecheck on the lean build, then the C++ bench, lean and default alternating.
# Binaries: prefill_test_lean, prefill_bench_lean (build-gpu-pd, the flag on), prefill_bench
# (build-gpu: the default, SASS-identical to session 18's look-ahead kernels).
#   run: bash scripts/sessions/gpu_session20_prefill.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s20b
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20b
room() { [ $SECONDS -lt "$1" ] || { echo "skipped ($2): ${SECONDS}s gone"; return 1; }; }
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m8 -E "Failure|illegal|Which is|error" "$OUT/$1.log"; }
timeout 150 "$B/prefill_test_lean" >"$OUT/prefill_full.log" 2>&1; verdict prefill_full $?
for tool in racecheck memcheck; do  # session 18's quick tile-edge filter
  KVATTN_GPU_TEST_QUICK=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/prefill_test_lean" --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases' \
    >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool.log" | tail -n 1)"
done
for round in 1 2; do
  for b in prefill_bench_lean prefill_bench; do
    room 520 "$b round $round" || break 2
    timeout $((580 - SECONDS)) "$B/$b" --reps 10 >"$OUT/${b}_r$round.log" 2>&1
    echo "$b r$round rc=$?"; grep -v '^{' "$OUT/${b}_r$round.log" | grep -E "default|ceiling" | grep -E "d64|ceiling"
  done
done
echo "end ${SECONDS}s"
