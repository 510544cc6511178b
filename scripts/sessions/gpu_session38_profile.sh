#!/usr/bin/env bash
# Session 38, call 2: the decode suite on this session's split kernel (warp_unit refactor), then
# Nsight Compute's per-instruction view of the stream decode kernel (SourceCounters: warp-state
# samples and instructions executed per SASS line; WarpStateStats, SpeedOfLight, memory,
# occupancy) at 96x4096 9/3 d64 and 64x4096 32/8 d128 (page 16), with the merge kernel after
# each: where the d64 kernel's time goes now that page 256 is known not to help (call 1).
#   run: bash scripts/sessions/gpu_session38_profile.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s38 (gpu_decode_bench, gpu_decode_probe,
#          kernels_decode_gpu_test, gpu_prefill_bench, kernels_prefill_gpu_test; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s38}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_logged decode_test env KVATTN_GPU_TEST_QUICK=1 "$B/kernels_decode_gpu_test"
profile() {  # LABEL ONLY
  local label=$1 only=$2
  timeout 200 ncu --clock-control none --kernel-name regex:'decode_kernel|merge_kernel' \
    --launch-count 2 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    -o "/tmp/ncu_$label" -f "$B/gpu_decode_bench" --only "$only" --variants default \
    > "$OUT/ncu_$label.log" 2>&1
  echo "ncu $label rc=$?"; grep -E "error|ERROR" "$OUT/ncu_$label.log" | head -5
  ncu --import "/tmp/ncu_$label.ncu-rep" --page source --csv --print-source sass \
    > "/tmp/source_$label.csv" 2>/dev/null
  echo "source $label: $(wc -l < /tmp/source_$label.csv) lines"
  xz -T0 -c "/tmp/source_$label.csv" > "$OUT/source_$label.csv.xz"
  ncu --import "/tmp/ncu_$label.ncu-rep" --page details --csv > "$OUT/details_$label.csv" 2>/dev/null
  grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued Instruction|Issue Slots Busy|DRAM Throughput|Memory Throughput|Block Limit Registers|Block Limit Shared Mem|Dynamic Shared Memory Per Block|Grid Size|Block Size)"' \
    "$OUT/details_$label.csv" | awk -F'","' '{print $5" | "$(NF-2)" "$(NF-1)" "$NF}' | head -40
}
room 330 "ncu d64" && profile d64 d64
room 450 "ncu d128" && profile d128 d128
echo "end ${SECONDS}s"
