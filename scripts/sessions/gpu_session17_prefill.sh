#!/usr/bin/env bash
# (Historical, session 17 call 4: the bench's "pdecode" rows are now "handover" / "handover_auto".)
# Session 17, call 4 (issue 15): the producer-side tile decode with the slot written by st.async
# in one-CTA cluster launches. The whole prefill suite on a build with it in every tile,
# racecheck and memcheck on the handover's tests, then the C++ bench's "pdecode" rows beside the
# default (same process, two rounds for the spread; cuBLAS ceiling in the same run).
#   run: bash scripts/sessions/gpu_session17_prefill.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-pf2 (gpu_prefill_bench and the pd test, built here, stripped and xz'd)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin && for f in build-carry-pf2/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
P=/tmp/bin/prefill_test_pd B=/tmp/bin/gpu_prefill_bench
step "the whole prefill suite on the handover"
timeout 240 "$P" --gtest_filter='PrefillGpu.*:PrefillGpuFeatures.*' >"$OUT/pd_full.log" 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/pd_full.log" | tr '\n' ' ')"
grep -m5 -E "Failure|illegal" "$OUT/pd_full.log"
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
    >"$OUT/pd_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_$tool.log" | tail -n 1)"
done
for round in 1 2; do
  step "timing round $round: default vs pdecode"
  timeout 200 "$B" --reps 20 >"$OUT/prefill_bench_$round.log" 2>&1
  echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_$round.log" | grep -E "default|pdecode|ceiling"
done
timeout 150 "$B" --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|pdecode"
