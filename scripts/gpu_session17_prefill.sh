#!/usr/bin/env bash
# Session 17, call 3 (issue 15): the producer-side tile decode with the slot written by
# st.async, timed beside the default in the C++ bench (rows "default" / "pdecode", same
# process, twice for the spread; cuBLAS ceiling in the same run), and memcheck on its tests.
#   run: bash scripts/gpu_session17_prefill.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-pf2 (gpu_prefill_bench and the pd test, built here, stripped and xz'd)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin && for f in build-carry-pf2/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
B=/tmp/bin/gpu_prefill_bench
step "memcheck on the handover's tests"
KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
  /tmp/bin/prefill_test_pd \
  --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps' \
  >"$OUT/pd_memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/pd_memcheck.log" | tail -n 1)"
for round in 1 2; do
  step "timing round $round: default vs pdecode"
  timeout 200 "$B" --reps 20 >"$OUT/prefill_bench_$round.log" 2>&1
  echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_$round.log" | grep -E "shape|default|pdecode|ceiling"
done
timeout 150 "$B" --d256 --reps 20 >"$OUT/prefill_bench_d256.log" 2>&1
echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_d256.log" | grep -E "default|pdecode"
