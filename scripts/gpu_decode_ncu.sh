#!/usr/bin/env bash
# Nsight Compute on the paged decode kernels as they stand after session 14 (the swapped fp8
# tile, the d64 16-row tile, the small kernel), for issue 16's next step: speed of light,
# occupancy, scheduler and every warp-stall reason (per issued instruction). Installs the Python
# package (sm_90a) and profiles bench/decode_profile_case.py (page 16, shuffled pages).
#   run: bash scripts/gpu_decode_ncu.sh > $OUT/summary.txt 2>&1   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_env.sh  # sets OUT (default ./out) and creates it
step "pip install kvattn (sm_90a)"
kvattn_pip_install python3 "$OUT/py_install.log" || { tail -n 30 "$OUT/py_install.log"; exit 1; }
step "ncu: decode kernels"
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
for c in "64 4096 32 8 128 --fp8" "64 4096 32 8 128" "96 4096 9 3 64" "1 8192 32 8 128"; do
  tag=$(echo "$c" | tr ' ' '_' | tr -d '-')
  (cd /tmp && timeout 100 ncu --clock-control none -k regex:decode_ --launch-skip 3 \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section SchedulerStats --section WarpStateStats --metrics "$stalls" \
    python3 "$OLDPWD/bench/decode_profile_case.py" $c >"$OUT/ncu_$tag.txt" 2>&1)
  echo "--- $c (rc=$?)"
  grep -E "decode_|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Block Limit (Reg|Shared)|Grid Size|Block Size|Dynamic Shared" \
    "$OUT/ncu_$tag.txt" | sed 's/  */ /g' | head -24
  # stall reasons above 0.05 cycles per issued instruction, largest first
  grep -E "issue_stalled_.*ratio" "$OUT/ncu_$tag.txt" | awk '{print $NF, $1}' |
    sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    awk '$1 + 0 > 0.05' | sort -rn | head -10 | tr '\n' ';'
  echo
done
