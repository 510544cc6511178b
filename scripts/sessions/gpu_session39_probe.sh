#!/usr/bin/env bash
# Session 39, call 3: where the lone 8192-key sequence's time goes with an L2-resident cache (the
# graph replay case of issue 16's <= 12 us target; cuDNN 12.9 us): gpu_decode_probe's small-
# kernel phase stamps after each flush (and the split kernel's balance rows it prints first);
# then issue 20's long workload with the per-phase breakdown (eager steps: attention share).
#   run: bash scripts/sessions/gpu_session39_probe.sh [CARRY] > $OUT/summary.txt 2>&1
#   carry: CARRY, default build-carry-s39d (gpu_decode_probe, kvattn; debs/)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
source scripts/device_carried.sh
carried_unpack "${1:-build-carry-s39d}"
trap pack_out EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
timeout 200 "$B/gpu_decode_probe" > "$OUT/probe.txt" 2>&1
echo "probe rc=$?"
grep -A12 "^## 1x8192 (max chunks 0)" "$OUT/probe.txt"
random_qwen3_06b
timeout 200 "$B/kvattn" bench --model /tmp/q06 --device cuda --workload long --no-compare \
  --breakdown --json "$OUT/long_breakdown.json" > "$OUT/long_breakdown.log" 2>&1
echo "long breakdown rc=$?"
tr '\r' '\n' < "$OUT/long_breakdown.log" | grep -E "Throughput|steps|attention|K/V|rror"
echo "end ${SECONDS}s"
