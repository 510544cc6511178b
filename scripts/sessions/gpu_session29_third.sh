#!/usr/bin/env bash
# Session 29: 3 stages for the 16-bit d64 16-row tile by default (decode_config). The decode
# suite (quick) and memcheck on the default, then the bench's quick rows with `s2` (the former
# d64 default) beside the default, two rounds.
#   run: bash scripts/sessions/gpu_session29_third.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s29c (kernels_decode_gpu_test, gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s29c
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite_quick "$B/kernels_decode_gpu_test"
room 200 "memcheck" && KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_default \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
for r in 1 2; do
  room 260 "decode r$r" || break
  timeout 120 "$B/gpu_decode_bench" --only decode --quick --variants 's2,copy' >"$OUT/decode_r$r.log" 2>&1
  echo "decode r$r rc=$?"
  grep -E '"decode (default|s2|copy)"' "$OUT/decode_r$r.log" | grep -E 'd64' | grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"frac_copy": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 | \5 | \6/'
done
echo "end ${SECONDS}s"
