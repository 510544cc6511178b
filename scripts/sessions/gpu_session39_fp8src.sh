#!/usr/bin/env bash
# Session 39, call 10: the fp8 d64 split kernel's instructions by SASS line (Nsight Compute's
# SourceCounters: instructions executed and warp-state samples per line), 96x4096 9/3 d64 page
# 16, to see what its 2.6x bf16's instructions a byte are (call 9).
#   run: bash scripts/sessions/gpu_session39_fp8src.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39f (gpu_decode_bench; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39f}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
timeout 200 ncu --clock-control none --kernel-name regex:'decode_kernel' --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o /tmp/ncu_fp8src -f \
  "$B/gpu_decode_bench" --only d64fp8 --variants default > "$OUT/ncu_fp8src.log" 2>&1
echo "ncu rc=$?"
ncu --import /tmp/ncu_fp8src.ncu-rep --page source --csv --print-source sass > /tmp/source_fp8.csv 2>/dev/null
echo "source: $(wc -l < /tmp/source_fp8.csv) lines"
xz -T0 -c /tmp/source_fp8.csv > "$OUT/source_fp8.csv.xz"
echo "end ${SECONDS}s"
