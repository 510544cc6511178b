#!/usr/bin/env bash
# Session 17, call 6 (issue 15): the plain-store tile handover chosen per launch (the library
# as committed; handover off by default): PrefillGpu.TileHandoverOnAndOff (modes 1 and 2) and
# the whole prefill suite, memcheck on the handover test (quick).
#   run: bash scripts/sessions/gpu_session17_verify.sh > $OUT/summary.txt 2>&1; tail -n 30 $OUT/summary.txt
#   carry: build-carry-pf2 (the prefill test built here, stripped and xz'd)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
mkdir -p /tmp/bin && xz -dc build-carry-pf2/kernels_prefill_gpu_test.xz > /tmp/bin/t && chmod +x /tmp/bin/t
timeout 240 /tmp/bin/t >"$OUT/full.log" 2>&1
echo "full rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/full.log" | tr '\n' ' ')"
grep -m5 -E "Failure|Which is" "$OUT/full.log"
KVATTN_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/bin/t \
  --gtest_filter='PrefillGpu.TileHandoverOnAndOff:PrefillGpu.TileEdges' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -n 1)"
