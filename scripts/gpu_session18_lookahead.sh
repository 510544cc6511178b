#!/usr/bin/env bash
# Session 18, call 1 (issue 15): the consumers' look-ahead tile decode (for_each_tile's
# kLookAhead, the plain and kMods kernels' default now) against HEAD~ (616a185):
#   1. the whole prefill suite (PrefillGpu.TileHandoverOnAndOff included);
#   2. racecheck and memcheck on the tile-edge tests (the default path: no hand-off);
#   3. the C++ bench, new / old / new, same call: default rows beside handover (always) and
#      handover_auto (<= 4096 keys).
#   run: bash scripts/gpu_session18_lookahead.sh > $OUT/summary.txt 2>&1; tail -n 80 $OUT/summary.txt
#   carry: build-carry-s18 (binaries built here, stripped and xz'd)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin && for f in build-carry-s18/prefill_*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
T=/tmp/bin/prefill_test_new
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m5 -E "Failure|illegal|Which is" "$OUT/$1.log"; }
step "1. the whole prefill suite"
timeout 240 "$T" >"$OUT/full.log" 2>&1; verdict full $?
step "2. sanitizers"
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$T" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps:PrefillGpuFeatures.WindowTileEdges' \
    >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool.log" | tail -n 1)"
done
for b in new old new; do
  step "3. timing: $b"
  timeout 170 /tmp/bin/prefill_bench_$b --reps 20 >"$OUT/bench_$b.log" 2>&1
  echo "rc=$?"; grep -v '^{' "$OUT/bench_$b.log" | grep -E "default|handover|ceiling"
  cat "$OUT/bench_$b.log" >> "$OUT/bench_all_$b.log"
done
