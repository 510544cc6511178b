#!/usr/bin/env bash
# Session 29: 3 stages for the 16-bit d64 16-row tile by default (decode_config). The decode
# suite (quick) and memcheck on the default, then the bench's quick rows with `s2` (the former
# d64 default) beside the default (one round: the call had ~200 s); then where 96x4096 9/3 d64 spends its time: the
# bench's d64 shape with the merge left out ("diag nomerge"), the swapped tile, heads per CTA,
# the small kernel at 1-2 chunks; ncu of its split and merge kernels (durations, occupancy,
# stalls).
#   run: bash scripts/sessions/gpu_session29_third.sh > $OUT/summary.txt 2>&1; tail -n 60 $OUT/summary.txt
#   carry: build-carry-s29c (kernels_decode_gpu_test, gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s29c
trap pack_out EXIT
KVATTN_GPU_TEST_QUICK=1 run_logged decode_suite_quick "$B/kernels_decode_gpu_test"
room 90 "memcheck" && KVATTN_GPU_TEST_QUICK=1 run_logged memcheck_default \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kernels_decode_gpu_test" \
  --gtest_filter='DecodeGpu.SweepAgainstReferenceAndCpu:DecodeGpu.ModerateBatchesAcrossKernelChoices:DecodeGpu.BadIndicesAreCaughtByTheFaultWord'
for r in 1; do
  room 130 "decode r$r" || break
  timeout 120 "$B/gpu_decode_bench" --only decode --quick --variants 's2,copy' >"$OUT/decode_r$r.log" 2>&1
  echo "decode r$r rc=$?"
  grep -E '"decode (default|s2|copy)"' "$OUT/decode_r$r.log" | grep -E 'd64' | grep -E 'no flush|flush: read' |
    sed -E 's/.*"op": "decode ([^"]*)", "shape": "([^"]*)", "us": ([0-9.]+).*"frac_copy": ([0-9.]+).*rel_l2 vs default ([^,]*), ([^"]*)".*/\2 | \1 | \3 us | \4 | \5 | \6/'
done
room 170 "d64 sweep" && {
  timeout 60 "$B/gpu_decode_bench" --only d64 --reps 30 \
    --variants 'diag nomerge,s2,s4,swap,swap s3,h4,h4 s2,small c1,small c2,small c1 w4' \
    >"$OUT/decode_d64.log" 2>&1
  echo "d64 sweep rc=$?"; grep -v '^{' "$OUT/decode_d64.log" | grep -E "^decode" | head -n 30
}
room 185 "ncu d64" && {
  timeout 50 ncu --clock-control none --kernel-name regex:'decode_kernel|merge_kernel' \
    --launch-count 2 --set full --import-source no -o /tmp/dec_d64 -f \
    "$B/gpu_decode_bench" --only d64 --reps 3 --variants default >"$OUT/ncu_d64.log" 2>&1
  echo "ncu d64 rc=$?"
  ncu --import /tmp/dec_d64.ncu-rep --page details --csv >"$OUT/dec_d64_details.csv" 2>&1
  grep -E '"(Duration|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit Registers|Block Limit Shared Mem|Warp Cycles Per Issued Instruction|Issue Slots Busy|Grid Size|Block Size)"' \
    "$OUT/dec_d64_details.csv" | awk -F'","' '{k=$5; sub(/[<(].*/, "", k); print k " | " $(NF-2) " | " $(NF-1) " | " $NF}' | head -n 30
}
echo "end ${SECONDS}s"
