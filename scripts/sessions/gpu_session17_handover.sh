#!/usr/bin/env bash
# (Historical, session 17 call 5: the bench rows "nohandover" and "cluster1" and the st.async form are gone.)
# Session 17, call 5 (issue 15): the tile handover (st.async slot, one-CTA cluster launches)
#   1. in every tile (a build with -DKVATTN_PREFILL_SM90_PRODUCER_DECODE=1, window / softcap /
#      ALiBi kernels included): the whole prefill suite, racecheck and memcheck on its tests;
#   2. the library's default (handover for sequences of <= 4096 keys,
#      CudaTuning::prefill_sm90_handover = 2): the whole prefill suite, with
#      PrefillGpu.TileHandoverOnAndOff;
#   3. the C++ bench: default (auto) beside "handover" (always), "nohandover" (never) and
#      "cluster1" (never, launched as one-CTA clusters: the launch's own cost).
#   run: bash scripts/sessions/gpu_session17_handover.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-pf2 (binaries built here, stripped and xz'd)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
step() { echo; echo "== $* == ($(date +%T))"; }
mkdir -p /tmp/bin && for f in build-carry-pf2/*.xz; do
  xz -dc "$f" > "/tmp/bin/$(basename "$f" .xz)" && chmod +x "/tmp/bin/$(basename "$f" .xz)"
done
P=/tmp/bin/prefill_test_pd T=/tmp/bin/kernels_prefill_gpu_test B=/tmp/bin/gpu_prefill_bench
verdict() { echo "$1 rc=$2 $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$1.log" | tr '\n' ' ')"
            grep -m5 -E "Failure|illegal|Which is" "$OUT/$1.log"; }
step "1. the handover in every tile: suite, racecheck, memcheck; 2. the default's suite"
timeout 240 "$P" >"$OUT/pd_full.log" 2>&1; verdict pd_full $?
timeout 240 "$T" >"$OUT/default_full.log" 2>&1; verdict default_full $?
for tool in racecheck memcheck; do
  KVATTN_GPU_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$P" \
    --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases:PrefillGpu.PagedProducerWarps:PrefillGpuFeatures.WindowTileEdges' \
    >"$OUT/pd_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/pd_$tool.log" | tail -n 1)"
done
for round in 1 2; do
  step "3. timing round $round: default (auto) vs handover / nohandover"
  timeout 200 "$B" --reps 20 >"$OUT/prefill_bench_$round.log" 2>&1
  echo "rc=$?"; grep -v '^{' "$OUT/prefill_bench_$round.log" | grep -E "default|handover|cluster1|ceiling"
done
