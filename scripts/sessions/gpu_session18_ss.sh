#!/usr/bin/env bash
# Session 18, call 2 (issue 20): call 1 measured the single stream at 540 tok/s (session 17:
# 969) with both KVATTN_FUSED_ROPE settings; this times session 17's CLI (build-carry-xz, HEAD
# then 616a185) beside this session's in the same call, alternating, to tell the machine from
# the code; then racecheck and memcheck on the prefill look-ahead (quick tile-edge tests).
#   run: bash scripts/sessions/gpu_session18_ss.sh > $OUT/summary.txt 2>&1; tail -n 40 $OUT/summary.txt
#   carry: build-carry-s18all build-carry-s18b
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
B=/tmp/bin; mkdir -p $B /opt/kvrun && xz -dc build-carry-s18all/bins.tar.xz | tar -C $B -xf - ./kvattn ./prefill_test_new
xz -dc build-carry-s18b/kvattn_s17.xz > $B/kvattn_s17 && chmod +x $B/kvattn_s17
for f in build-carry-s18all/debs/*.deb; do dpkg -x "$f" /opt/kvrun; done
export LD_LIBRARY_PATH="/opt/kvrun/usr/lib/x86_64-linux-gnu:/opt/kvrun/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv
(PYTHONUNBUFFERED=1 timeout 100 python3 scripts/make_random_qwen3.py --shape 0.6b --out /tmp/q06 2>&1 | tail -n 1)
ss() {  # $1: label, $2: binary
  timeout 60 $B/$2 bench --model /tmp/q06 --device cuda \
    --num-seqs 2 --min-input 64 --max-input 64 --min-output 8 --max-output 8 \
    --single-input 128 --single-output 256 >"$OUT/ss_$1.log" 2>&1
  echo "$1 rc=$?: $(tr '\r' '\n' < "$OUT/ss_$1.log" | grep -E "single" | tr '\n' ' ')"
}
for round in 1 2; do
  ss "s17_r$round" kvattn_s17
  KVATTN_FUSED_ROPE=0 ss "rope0_r$round" kvattn
  KVATTN_FUSED_ROPE=1 ss "rope1_r$round" kvattn
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv
for tool in racecheck memcheck; do
  [ $SECONDS -lt 400 ] || { echo "$tool skipped: ${SECONDS}s gone"; continue; }
  KVATTN_GPU_TEST_QUICK=1 timeout $((470 - SECONDS)) compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/prefill_test_new --gtest_filter='PrefillGpu.TileEdges:PrefillGpu.EdgeCases' >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool.log" | tail -n 1)"
done
echo "end ${SECONDS}s"
