#!/usr/bin/env bash
# Session 39, call 9: why fp8 at head_dim 64 gains only 1.11-1.13x over bf16 on the H200 (1.43-1.50
# on the H100): Nsight Compute's summary sections for the split kernel at 96x4096 9/3 d64 page 16
# over an fp8 cache and over bf16, on whatever card comes.
#   run: bash scripts/sessions/gpu_session39_fp8prof.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39f (gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39f}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
profile() {  # LABEL ONLY
  local label=$1 only=$2
  timeout 150 ncu --clock-control none --kernel-name regex:'decode_kernel' --launch-count 1 \
    --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section InstructionStats --section SchedulerStats \
    -o "/tmp/ncu_$label" -f "$B/gpu_decode_bench" --only "$only" --variants default \
    > "$OUT/ncu_$label.log" 2>&1
  echo "ncu $label rc=$?"; grep -E "error|ERROR" "$OUT/ncu_$label.log" | head -5
  ncu --import "/tmp/ncu_$label.ncu-rep" --page details --csv > "$OUT/details_$label.csv" 2>/dev/null
  grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Instructions|DRAM Throughput|Memory Throughput|Block Limit Registers|Block Limit Shared Mem|Grid Size|Block Size|Stall [A-Za-z ]*|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler)"' \
    "$OUT/details_$label.csv" | awk -F'","' '{print $5" | "$(NF-2)" "$(NF-1)" "$NF}' | head -60
}
room 200 "ncu fp8" && profile fp8 d64fp8
room 300 "ncu bf16" && profile bf16 d64
echo "end ${SECONDS}s"
