#!/usr/bin/env bash
# Session 20, call 5: nano-vllm's workload with the decode merge kernel's PDL off and on,
# alternating, three rounds (call 4 had one each: 24,066 vs 23,922 tok/s, within the run-to-run
# spread of earlier calls), to decide the engine's default.
#   run: bash scripts/sessions/gpu_session20_fifth.sh > $OUT/summary.txt 2>&1; tail -n 20 $OUT/summary.txt
#   carry: build-carry-s20d
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_carried.sh
carried_unpack build-carry-s20d
random_qwen3_06b
trap pack_out EXIT
for round in 1 2 3; do
  for mp in 0 1; do
    [ $SECONDS -lt 330 ] || { echo "skipped: ${SECONDS}s gone"; break 2; }
    KVATTN_DECODE_MERGE_PDL=$mp timeout 60 "$B/kvattn" bench --model /tmp/q06 --device cuda \
      --single-input 16 --single-output 8 --ttft-input 16 >"$OUT/nano_r${round}_mp$mp.log" 2>&1
    echo "round $round mp$mp rc=$?: $(tr '\r' '\n' < "$OUT/nano_r${round}_mp$mp.log" | grep -E "Throughput" | head -n 1)"
  done
done
echo "end ${SECONDS}s"
