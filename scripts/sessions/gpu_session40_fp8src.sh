#!/usr/bin/env bash
# Session 40, call 2: the fp8 d64 split kernel after call 1's instruction diet: Nsight Compute's
# summary sections and its instructions by SASS line (96x4096 9/3 d64 page 16, as session 39's
# calls 9-10), then two more rounds of `--only fp8` against the build before it (call 1 saw the
# lone 8192-key rows 0.3-1 us slower with the new build: noise or not).
#   run: bash scripts/sessions/gpu_session40_fp8src.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s40a (gpu_decode_bench, old_gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s40a}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
timeout 150 ncu --clock-control none --kernel-name regex:'decode_kernel' --launch-count 1 \
  --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section InstructionStats --section SchedulerStats \
  -o /tmp/ncu_fp8 -f "$B/gpu_decode_bench" --only d64fp8 --variants default \
  > "$OUT/ncu_fp8.log" 2>&1
echo "ncu summary rc=$?"
ncu --import /tmp/ncu_fp8.ncu-rep --page details --csv > "$OUT/details_fp8.csv" 2>/dev/null
grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Instructions|DRAM Throughput|Memory Throughput|Block Limit Registers|Block Limit Shared Mem|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler)"' \
  "$OUT/details_fp8.csv" | awk -F'","' '{print $5" | "$(NF-2)" "$(NF-1)" "$NF}' | head -40
room 300 "ncu source" && {
  timeout 200 ncu --clock-control none --kernel-name regex:'decode_kernel' --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/ncu_fp8src -f \
    "$B/gpu_decode_bench" --only d64fp8 --variants default > "$OUT/ncu_fp8src.log" 2>&1
  echo "ncu source rc=$?"
  ncu --import /tmp/ncu_fp8src.ncu-rep --page source --csv --print-source sass \
    > /tmp/source_fp8.csv 2>/dev/null
  echo "source: $(wc -l < /tmp/source_fp8.csv) lines"
  xz -T0 -c /tmp/source_fp8.csv > "$OUT/source_fp8.csv.xz"
}
rows="^decode default +1x8192"
for round in 3 4; do
  for side in new old; do
    bin=gpu_decode_bench; [ $side = old ] && bin=old_gpu_decode_bench
    room 500 "bench" && bench_rows "fp8_${side}$round" $bin "$rows" --only fp8 --variants default
  done
done
echo "end ${SECONDS}s"
